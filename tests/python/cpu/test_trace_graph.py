"""tools/trace_graph.sh without a GPU: it says how to call it, and that it needs two GPUs, and stops."""

import os
import subprocess

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _run(*args):
    return subprocess.run(
        ["bash", "tools/trace_graph.sh", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_without_its_arguments_it_prints_its_usage(tmp_path):
    done = _run(str(tmp_path / "out"))
    assert done.returncode == 2
    assert "usage: tools/trace_graph.sh OUT SHAPES" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="on a node of two GPUs the tool builds and traces")
def test_on_a_node_without_two_gpus_it_stops_before_building(tmp_path):
    done = _run(str(tmp_path / "out"), "256,8,7168,1")
    assert done.returncode == 2
    assert "needs two or more GPUs" in done.stderr
    assert not (tmp_path / "out" / "trace" / "build-profiler.log").exists()
