"""tools/check_tree_size.sh: the committed tree's size against the budget a device call leaves (CI runs it)."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _check(budget_mb):
    env = dict(os.environ, TREE_BUDGET_MB=str(budget_mb))
    return subprocess.run(
        ["bash", "tools/check_tree_size.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def _tracked_mb():
    sizes = subprocess.run(
        ["git", "ls-tree", "-r", "-l", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return sum(int(line.split()[3]) for line in sizes.splitlines() if line.split()[3] != "-") / 1e6


def test_under_the_budget_it_passes_and_says_the_size():
    done = _check(1000)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tracked files: {_tracked_mb():.1f} MB, budget 1000 MB\n"


def test_over_the_budget_it_fails_and_names_the_largest_results():
    done = _check(0.001)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"tracked files: {_tracked_mb():.1f} MB, over the budget of 0.001 MB")
    assert "docs/results/ARCHIVED.md" in lines[0]
    listed = [line.split()[-1] for line in lines[1:]]
    assert 0 < len(listed) <= 15 and all(path.startswith("docs/results/") for path in listed)
