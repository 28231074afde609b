#!/usr/bin/env bash
# Formats the tree, or (--check) fails listing what is not formatted. CI runs the check.
#   C++/CUDA/HIP: clang-format-19 with .clang-format over csrc/ include/ tests/ tools/
#   Python:       ruff format and ruff check (config in pyproject.toml) over python/ tests/ benchmarks/ examples/ tools/ setup.py
# Needs clang-format-19 (Debian: apt-get install clang-format-19) and ruff 0.17.6 (pip install ruff==0.17.6).
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT="${CLANG_FORMAT:-clang-format-19}"
RUFF="${RUFF:-ruff}"  # CI pins the version (.ci/run): another ruff may format differently
mode=${1:-apply}
[[ "$mode" == apply || "$mode" == --check ]] || { echo "usage: tools/format.sh [--check]" >&2; exit 2; }

mapfile -t cxx < <(git ls-files csrc include tests tools | grep -E '\.(cu|cuh|cpp|h|hpp)$')
py_dirs=(python tests benchmarks examples tools setup.py)
status=0
if [[ "$mode" == --check ]]; then
  "$CLANG_FORMAT" --dry-run -Werror "${cxx[@]}" || { echo "format: C++ files differ from clang-format (run tools/format.sh)"; status=1; }
  $RUFF format --check "${py_dirs[@]}" || { echo "format: Python files differ from ruff format (run tools/format.sh)"; status=1; }
  $RUFF check "${py_dirs[@]}" || status=1
else
  "$CLANG_FORMAT" -i "${cxx[@]}"
  $RUFF format "${py_dirs[@]}"
  $RUFF check --fix "${py_dirs[@]}" || status=1
fi
exit $status
