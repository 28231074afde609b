#!/usr/bin/env bash
# A fingerprint of the sources a build and a run use (csrc/, include/, the package's Python files,
# benchmarks/, setup.py, CMakeLists.txt): the same value wherever the same files are, with or without
# git. The device machine's copy of a checkout may carry an older .git, so gpu_run.sh and graph_ab.sh
# print this to say what ran; run it in a checkout to match a log to a commit.
#   tools/source_hash.sh [TREE]   (default: this checkout)
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
paths=()
for p in csrc include python/moe_a2a benchmarks setup.py CMakeLists.txt; do [ -e "$p" ] && paths+=("$p"); done
[ ${#paths[@]} -gt 0 ] || { echo "no sources"; exit 0; }
find "${paths[@]}" -type f \
  \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.cpp' -o -name '*.py' -o -name '*.txt' \) \
  -not -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha1sum | sha1sum | cut -c1-12
