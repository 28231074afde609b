"""MultiNodeAllToAll without a GPU: processes over gloo as emulated nodes (ranks_per_node), the
network legs real all_to_all_singles over each rail's group. Nodes of 2 ranks use a stand-in for
the in-node AllToAll with the same delivery (multinode_worker.GatherExchange); nodes of one rank
run the real LocalExchange, so there the whole path runs, backward included. Every rank's combine
must give the one-node reference's result, with unequal counts (0 included) and unused slots,
and the gradients their closed forms; every expert must get the one-node dispatch (fp8 too); too
small a node_capacity must raise at synchronize() on the ranks that sent too much. The real
in-node AllToAll, NCCL and GPUs: tests/python/gpu/test_multinode.py."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from multinode_worker import FP8_H, H, K, dispatch_record_bytes, expected_calls, result_line  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multinode_worker.py")
PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python")


def run_ranks(world, per_node, case, tmp_path):
    env = dict(os.environ, PYTHONPATH=PYTHON + os.pathsep + os.environ.get("PYTHONPATH", ""))
    store = "file://" + str(tmp_path / "store")
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, str(r), str(world), str(per_node), store, case],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return [result_line(o, case) for o in outs]


@pytest.mark.parametrize("world", [4, 8])
def test_two_legs_across_processes_give_the_one_node_result(world, tmp_path):
    lines = run_ranks(world, 2, "result", tmp_path)
    for r, line in enumerate(lines):
        assert line.startswith("ok "), f"rank {r}: {line}"
        assert float(line.split()[1]) < 1e-6, f"rank {r}: {line}"


def test_too_small_a_node_capacity_is_reported(tmp_path):
    lines = run_ranks(4, 2, "overflow", tmp_path)
    assert any("node_capacity=2" in line for line in lines), lines


@pytest.mark.parametrize("world", [2, 4])
def test_nodes_of_one_rank_forward_and_backward(world, tmp_path):
    lines = run_ranks(world, 1, "backward", tmp_path)
    for r, line in enumerate(lines):
        assert line.startswith("ok "), f"rank {r}: {line}"
        assert all(float(e) < 1e-5 for e in line.split()[1:4]), f"rank {r}: {line}"


@pytest.mark.parametrize("fp8", [False, True], ids=["token_dtype", "fp8"])
@pytest.mark.parametrize("world,per_node", [(4, 2), (2, 1)], ids=["2x2", "2x1"])
def test_experts_get_the_one_node_dispatch(world, per_node, fp8, tmp_path):
    """What each expert gets, mapped back through the forwarding ranks' plans, is the one-node
    reference's dispatch: the same (source rank, token, k) pairs, unused slots and a token of no
    expert sending nothing, each row its token; with fp8 dispatch the fp8 bytes and scales of
    quantize_fp8 (rows quantized once, on the sending rank), and combine of the dequantized rows
    gives the reference's result."""
    lines = run_ranks(world, per_node, "fp8" if fp8 else "dispatch", tmp_path)
    for r, line in enumerate(lines):
        assert line.startswith("ok "), f"rank {r}: {line}"
        assert float(line.split()[1]) < 1e-6, f"rank {r}: {line}"


@pytest.mark.parametrize("fp8", [False, True], ids=["fp32", "fp8"])
@pytest.mark.parametrize("world,per_node", [(4, 2), (2, 1), (4, 1)], ids=["2x2", "2x1", "4x1"])
def test_each_leg_is_one_all_to_all_single_of_the_documented_bytes(world, per_node, fp8, tmp_path):
    """dispatch sends one all_to_all_single (rows, ids, weights and fp8 scales in one byte record
    per node and slot), of nodes x node_capacity x the record's bytes (the documented formula);
    combine one of the partial sums; the backward (nodes of one rank) one for each leg: combine's
    partials' gradients, and dispatch's rows' and weights' gradients in one record (fp8: the
    weights' only)."""
    assert dispatch_record_bytes(H, K, 4, False) == 160 and dispatch_record_bytes(FP8_H, K, 4, True) == 208
    want = expected_calls(world // per_node, fp8, backward=per_node == 1)
    for r, line in enumerate(run_ranks(world, per_node, "calls_fp8" if fp8 else "calls", tmp_path)):
        assert line.startswith("ok "), f"rank {r}: {line}"
        assert json.loads(line[3:]) == want, f"rank {r}: {line}"
