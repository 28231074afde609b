"""tools/graph_ab.sh without a GPU: the order in which it times the trees and what compare.md lists.

python3 (for the GPU count and the builds) and torchrun are stand-ins on PATH: each "timing run" records
its name and copies a stored bench_graph.json, so only the script's own logic runs.
"""

import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
STORED_RUN = os.path.join(ROOT, "docs/results/2026-11-23-h100-mps-proxy/bench_graph-baseline-run1.json")


def _stand_ins(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    order = tmp_path / "order.txt"
    python = bin_dir / "python3"
    python.write_text(
        "#!/bin/bash\n"
        'if [ "$1" = "-c" ]; then echo 2; exit 0; fi  # the GPU count: a two-GPU node\n'
        '# a build (tools/build_trees.sh), which fails in a tree named "broken"\n'
        'if [ "$1" = "setup.py" ]; then [ "$(basename "$PWD")" != broken ]; exit; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    torchrun = bin_dir / "torchrun"
    torchrun.write_text(
        "#!/bin/bash\n"
        'out=""; while [ $# -gt 0 ]; do [ "$1" = "--out" ] && out=$2; shift; done\n'
        f'mkdir -p "$out" && basename "$out" >> {order} && cp {STORED_RUN} "$out/bench_graph.json"\n'
    )
    for f in (python, torchrun):
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return bin_dir, order


def _run(tmp_path, rounds, other_name="other"):
    bin_dir, order = _stand_ins(tmp_path)
    other = tmp_path / other_name
    other.mkdir()
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    if rounds is not None:
        env["AB_ROUNDS"] = str(rounds)
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", "tools/graph_ab.sh", str(out), ".", str(other)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, order.read_text().split() if order.exists() else [], out


@pytest.mark.skipif(not os.path.exists(STORED_RUN), reason="needs the stored proxy run")
def test_graph_ab_times_the_base_again_at_the_end(tmp_path):
    done, order, out = _run(tmp_path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert order == ["1-this", "2-other", "3-base-again"]
    head = (out / "compare.md").read_text().splitlines()[0]
    assert head.startswith("| shape | this us (p10-p90) | other us (p10-p90) | base-again us (p10-p90) |")


@pytest.mark.skipif(not os.path.exists(STORED_RUN), reason="needs the stored proxy run")
def test_graph_ab_rounds_alternate_the_order(tmp_path):
    done, order, out = _run(tmp_path, 3)
    assert done.returncode == 0, done.stdout + done.stderr
    assert order == ["1-this", "2-other", "3-other.r2", "4-this.r2", "5-this.r3", "6-other.r3"]
    head = (out / "compare.md").read_text().splitlines()[0]
    assert "| this us (p10-p90) | other us (p10-p90) | other.r2 us (p10-p90) | this.r2 us (p10-p90) |" in head


def test_graph_ab_refuses_a_bad_round_count(tmp_path):
    done, order, _ = _run(tmp_path, "two")
    assert done.returncode == 2
    assert "AB_ROUNDS must be a positive integer, got two" in done.stderr
    assert order == []


@pytest.mark.skipif(not os.path.exists(STORED_RUN), reason="needs the stored proxy run")
def test_graph_ab_names_a_tree_that_did_not_build_and_times_the_others(tmp_path):
    done, order, _ = _run(tmp_path, None, other_name="broken")
    assert done.returncode == 1
    assert "-- broken: build failed" in done.stdout
    assert order == ["1-this", "3-base-again"]


def test_build_trees_builds_each_tree_with_its_suffixs_switches(tmp_path):
    """tools/build_trees.sh with a stand-in python3 that records each build's folder and switches: a plain tree, a
    :hooks one (the GPU tests' hooks) and a :profiler one (the in-kernel profiler), built with nothing else on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "seen.txt"
    python = bin_dir / "python3"
    python.write_text(f'#!/bin/bash\necho "$(basename "$PWD") $MOE_A2A_TEST_HOOKS $MOE_A2A_PROFILE" >> {seen}\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    for name in ("plain", "tested", "traced"):
        (tmp_path / name).mkdir()
    done = subprocess.run(
        [
            "bash",
            "tools/build_trees.sh",
            str(tmp_path / "logs"),
            str(tmp_path / "plain"),
            f"{tmp_path / 'tested'}:hooks",
            f"{tmp_path / 'traced'}:profiler",
        ],
        cwd=ROOT,
        env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["build plain rc=0", "build tested rc=0", "build traced rc=0"]
    assert sorted(seen.read_text().split("\n")[:-1]) == ["plain 0 0", "tested 1 0", "traced 0 1"]
