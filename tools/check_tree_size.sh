#!/usr/bin/env bash
# The committed tree must leave room for a device call. The device tool copies the working tree (tracked files, and
# untracked ones git does not ignore) and the carried trees (.exp/<name>, 1-2.3 MB each) to the GPU machine, 64 MiB
# in all, and refuses a call over that. So the files of HEAD stay under TREE_BUDGET_MB (default 40), leaving room for
# a few carried trees and a session's new results.
#   tools/check_tree_size.sh
# Over the budget it names the largest files under docs/results/: move the raw archives and traces of older sessions
# out of the tree into git's history, as docs/results/ARCHIVED.md says. Exit status 1 then.
set -euo pipefail
cd "$(dirname "$0")/.."
budget_mb=${TREE_BUDGET_MB:-40}
bytes=$(git ls-tree -r -l HEAD | awk '{s += $4} END {print s + 0}')
mb=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1e6}')
if awk -v b="$bytes" -v m="$budget_mb" 'BEGIN {exit !(b <= m * 1e6)}'; then
  echo "tracked files: $mb MB, budget $budget_mb MB"
  exit 0
fi
echo "tracked files: $mb MB, over the budget of $budget_mb MB (a device call copies them, 64 MiB at most with" \
  "the carried trees). The largest under docs/results/ (move older sessions' out: docs/results/ARCHIVED.md):" >&2
git ls-tree -r -l HEAD docs/results | sort -k4,4nr | awk 'NR <= 15 {printf "  %8.2f MB  %s\n", $4 / 1e6, $5}' >&2
exit 1
