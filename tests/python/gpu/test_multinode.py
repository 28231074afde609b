"""MultiNodeAllToAll on GPUs (issue 39): 2 x world worker processes emulate two nodes of `world`
ranks each, the in-node exchange the real AllToAll over NVLink, the network legs NCCL
all_to_all_singles over each rail; and `world` workers emulate `world` nodes of one rank each
(LocalExchange in the node, NCCL between). The worker (tests/python/multinode_worker.py, also
the CPU test's) checks every rank's combine against the one-node reference with unequal counts
(0 included) and unused slots, the gradients of x and of the router weights against their closed
forms, a CUDA graph of the whole round replayed on new inputs, the overflow report, and what
every expert gets against the one-node reference's dispatch, with fp8 dispatch too (the bytes and
scales of quantize_fp8 of each pair's token, quantized once on the sending rank), and that each
network leg is one all_to_all_single of the documented bytes, forward and backward.

With two nodes, worker w (node n = w // world, local rank l = w % world) runs on GPU (l + n) %
world: each node's ranks are on different GPUs, and so are each rail's, as NCCL needs; every GPU
holds one worker of each node, so its two AllToAll kernels share the GPU by time slices (correct,
not fast). Each test rank starts the workers of its own GPU, once per layout: they run every case
of the layout in one process each (LAYOUT_CASES; a start-up of the workers took 5-7 s), and each
test checks its case's result lines."""

import json
import os
import subprocess
import sys

import pytest
import torch
from worker_procs import file_rendezvous, worker_env

from moe_a2a._collective import all_gather

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from multinode_worker import expected_calls, result_line  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multinode_worker.py")
# The cases each layout's workers run, in this order (overflow last: only the ranks that sent too
# much raise there, so the ranks may part ways).
LAYOUT_CASES = {
    "two_nodes": ("backward", "graph", "dispatch", "fp8", "overflow"),
    "nodes_of_one_rank": ("backward", "graph", "dispatch", "fp8", "calls", "calls_fp8"),
}
TIMEOUT_S = 240  # for all of a layout's cases
_results = {}  # layout -> {case: {worker: result line}}, filled by the layout's first test


def run_workers(rank, world, layout):
    """Starts the workers of this test rank's GPU, of 2 x world workers in nodes of world ranks
    (two_nodes) or of world nodes of one rank (nodes_of_one_rank), which run every case of the
    layout; returns {case: {worker: result line}}."""
    per_node = per_node_of(layout, world)
    cases = LAYOUT_CASES[layout]
    workers = 2 * world if per_node == world else world
    init = file_rendezvous(rank)
    gpu = torch.cuda.current_device()
    mine = [w for w in range(workers) if (w % per_node + w // per_node) % world == rank]
    procs = {
        w: subprocess.Popen(
            [sys.executable, WORKER, str(w), str(workers), str(per_node), init, ",".join(cases), str(gpu)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=worker_env(),
        )
        for w in mine
    }
    outs = {}
    for w, p in procs.items():
        try:
            outs[w] = p.communicate(timeout=TIMEOUT_S)[0]
        except subprocess.TimeoutExpired:
            for q in procs.values():
                q.kill()
            pytest.fail(f"worker {w} of {workers} ({layout}) did not finish in {TIMEOUT_S} s")
        assert p.returncode == 0, f"worker {w} of {workers} ({layout}) exited {p.returncode}:\n{outs[w][-4000:]}"
    return {case: {w: result_line(out, case) for w, out in outs.items()} for case in cases}


def results(rank, world, layout, case):
    """Each of this GPU's workers' result line for `case` of `layout` (the workers run once per
    layout, at its first test; a failed run fails each test that asks for it again)."""
    if layout not in _results:
        _results[layout] = None  # a failure below leaves it None, so no later test runs it again
        _results[layout] = run_workers(rank, world, layout)
    if _results[layout] is None:
        pytest.fail(f"the {layout} workers failed at an earlier test of this file")
    return _results[layout][case]


def per_node_of(layout, world):
    return world if layout == "two_nodes" else 1


@pytest.fixture(autouse=True)
def _needs_a_gpu_per_rank(one_gpu):
    if one_gpu:
        pytest.skip("NCCL refuses two ranks of a rail on one GPU: needs a GPU per test rank")


@pytest.mark.parametrize("layout", ["two_nodes", "nodes_of_one_rank"])
def test_forward_and_backward_give_the_reference(rank, world, layout):
    for w, line in results(rank, world, layout, "backward").items():
        assert line.startswith("ok "), f"worker {w}: {line}"
        out, grad_x, grad_w = (float(e) for e in line.split()[1:4])
        assert out < 1e-5 and grad_x < 1e-5 and grad_w < 1e-5, f"worker {w}: {line}"


@pytest.mark.parametrize("layout", ["two_nodes", "nodes_of_one_rank"])
def test_one_cuda_graph_holds_the_round(rank, world, layout):
    for w, line in results(rank, world, layout, "graph").items():
        assert line.startswith("ok "), f"worker {w}: {line}"
        assert all(float(e) < 1e-5 for e in line.split()[1:]), f"worker {w}: {line}"


@pytest.mark.parametrize("case", ["dispatch", "fp8"])
@pytest.mark.parametrize("layout", ["two_nodes", "nodes_of_one_rank"])
def test_experts_get_the_one_node_dispatch(rank, world, layout, case):
    for w, line in results(rank, world, layout, case).items():
        assert line.startswith("ok "), f"worker {w}: {line}"
        assert float(line.split()[1]) < 1e-5, f"worker {w}: {line}"


def test_too_small_a_node_capacity_is_reported(rank, world):
    lines = results(rank, world, "two_nodes", "overflow")
    mine = [line for line in lines.values() if "node_capacity=2" in line]
    everyone = all_gather(len(mine), None)
    assert sum(everyone) > 0, f"no worker reported the overflow: {lines}"


@pytest.mark.parametrize("case", ["calls", "calls_fp8"])
def test_each_leg_is_one_all_to_all_single_of_the_documented_bytes(rank, world, case):
    """Nodes of one rank (LocalExchange, NCCL between): dispatch, combine and the backward each
    issue one all_to_all_single per leg, of the bytes docs/design/multinode.md states."""
    want = expected_calls(world, case == "calls_fp8", backward=True)
    for w, line in results(rank, world, "nodes_of_one_rank", case).items():
        assert line.startswith("ok "), f"worker {w}: {line}"
        assert json.loads(line[3:]) == want, f"worker {w}: {line}"
