#!/usr/bin/env bash
# The start that every device-call driver (docs/results/*/callN-driver.sh) shares, sourced first:
#   source tools/device_call.sh
# on the device machine, from the checkout's root, with OUT set (the run tool's folder). It sets -u, the
# no-multicast environment (tools/no_multicast_env.sh) and unbuffered Python output; defines `log MESSAGE`,
# a line with the seconds since this file was sourced, to stdout and $OUT/driver.log; writes the machine's
# GPUs and driver to $OUT/driver.log; and makes L=$OUT/logs for the call's logs. The drivers that ran
# before it was written spell these lines out, as they ran.
set -u
: "${OUT:?tools/device_call.sh: OUT is not set (the run tool sets it)}"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/no_multicast_env.sh"
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a "$OUT/driver.log"; }
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/driver.log"
else
  echo "no nvidia-smi on this machine" >> "$OUT/driver.log"
fi
L=$OUT/logs
mkdir -p "$L"
