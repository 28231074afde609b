"""bench_moe_layer.py: its arguments and sizing, its report, and the in-run floor's fields.

CPU only (no GPU, no second rank): python -m pytest benchmarks/tests
"""

import os
import tempfile

import common
import pytest
import torch
from fakes import FakeCtx


def test_moe_layer_bench_cli_and_sizing():
    import bench_moe_layer as bm

    a = bm.parse_args([])
    assert a.token_list == [128, 512, 2048] and (a.experts, a.topk, a.hidden, a.ffn) == (256, 8, 7168, 2048)
    assert a.dtype_t == torch.bfloat16 and a.layout == "packed" and a.phase_list == list(bm.PHASES)
    a = bm.parse_args(
        [
            "--tokens",
            "4,8",
            "--shape",
            "16,2,64,32",
            "--phases",
            "dispatch,fwd+bwd",
            "--dtype",
            "fp32",
            "--layout",
            "padded",
            "--no-check",
        ]
    )
    assert a.phase_list == ["dispatch", "fwd+bwd"] and a.dtype_t == torch.float32 and not a.check
    assert bm.parse_args([]).floor and not bm.parse_args(["--no-floor"]).floor
    # the graph phases: --graph-iters calls a graph, over a pool of 8 or more; the eager phases, any pool
    assert set(bm.GRAPH_PHASES) <= set(bm.PHASES) and (a.pool, a.graph_iters) == (8, 10)
    assert bm.parse_args(["--pool", "4", "--phases", "dispatch,combine-bwd"]).pool == 4
    # --trace: a file per (T, counts, phase), the counts' "/" kept out of the name
    assert bm.parse_args([]).trace is None and bm.parse_args(["--trace", "/tmp/t"]).trace == "/tmp/t"
    assert bm.trace_path("/tmp/t", 128, "0/128", "combine-bwd") == "/tmp/t-T128-0_128-combine-bwd.json"
    assert set(bm.TRACED_PHASES) <= set(bm.PHASES)
    # --capacity: the layer's tokens a rank, at least every T (0: each T itself)
    assert bm.parse_args([]).capacity == 0 and bm.parse_args(["--capacity", "2048"]).capacity == 2048
    # --counts: specs normalized and deduplicated, each count at most the smallest T
    assert bm.parse_args([]).count_list == ["max"]
    assert bm.parse_args(["--counts", "max; drawn;0/ 128;drawn"]).count_list == ["max", "drawn", "0/128"]
    drawn = bm.pool_counts("drawn", 128, 2, 1, 50, seed=3)
    assert all(1 <= n <= 128 for n in drawn) and len(set(drawn)) > 1
    assert drawn == bm.pool_counts("drawn", 128, 2, 1, 50, seed=3) != bm.pool_counts("drawn", 128, 2, 0, 50, seed=3)
    assert bm.pool_counts("0/128", 128, 2, 0, 3, seed=0) == [0, 0, 0]
    assert bm.pool_counts("0/128", 128, 4, 3, 2, seed=0) == [128, 128]  # rank r: entry r % n
    assert bm.pool_counts("max", 64, 2, 1, 2, seed=0) == [64, 64]
    for bad in (
        ["--counts", "0/129"],  # above --tokens 128 (the smallest T)
        ["--tokens", "64,128", "--counts", "100/1"],
        ["--counts", "issue35"],
        ["--counts", ";"],
        ["--tokens", "0"],
        ["--shape", "8,9,64,32"],
        ["--shape", "8,2,64"],
        ["--phases", "attention"],
        ["--iters", "3"],
        ["--trace", "/tmp/t", "--phases", "forward,experts"],  # no all-to-all round to trace
        ["--capacity", "1024"],  # below --tokens 2048
        ["--pool", "4"],  # the graph phases (in the default --phases) need 8 inputs
        ["--pool", "7", "--phases", "dispatch,graph-train"],
        ["--graph-iters", "0"],
    ):
        with pytest.raises(SystemExit):
            bm.parse_args(bad)
    # packed: worst case T x world x min(K, E_local) rows, unless the budget is smaller
    assert bm.recv_capacity("packed", 128, 2, 256, 8, 7168, 2, 4 << 30) == (2048, None)
    assert bm.recv_capacity("packed", 4, 8, 16, 8, 64, 2, 1 << 30) == (4 * 8 * 2, None)  # 2 experts per rank
    assert bm.recv_capacity("packed", 4096, 8, 256, 8, 7168, 2, 1 << 30) == ((1 << 30) // (7168 * 2), None)
    # padded: T x world rows per local expert, capped so all local experts fit the budget
    assert bm.recv_capacity("padded", 64, 2, 256, 8, 7168, 2, 4 << 30) == (None, 128)
    assert bm.recv_capacity("padded", 2048, 2, 256, 8, 7168, 2, 1 << 30) == (None, (1 << 30) // (7168 * 2 * 128))
    assert bm.expert_flops(10, 7, 3) == 3 * 2 * 10 * 7 * 3
    assert bm.expert_flops(10, 7, 3, backward=True) == 3 * bm.expert_flops(10, 7, 3)
    assert bm.weight_bytes_per_rank(256, 2, 7168, 2048, 2) / 2**30 == pytest.approx(10.5, rel=1e-3)
    # hbm-y's rows: the (token, k)s of every rank whose expert is one of the rank's (-1: none)
    ids = [torch.tensor([[0, 3], [4, 7]]), torch.tensor([[1, -1]]), torch.zeros(0, 2, dtype=torch.long)]
    assert [bm.rows_of_rank(ids, 8, 2, r) for r in (0, 1)] == [3, 2]


def test_moe_layer_bench_report():
    import bench_moe_layer as bm
    import scaffold

    base = {"tokens": 128, "world": 2}
    rows = [
        bm.phase_row(base, "forward", [10.0, 20.0, 30.0], flops=6e6),
        bm.phase_row(base, "dispatch", [5.0] * 4),
        dict(base, phase="fwd+bwd", status="error: RuntimeError: capacity"),
    ]
    assert rows[0]["us_median"] == 20.0 and rows[0]["tflops"] == pytest.approx(6e6 / 20e6)
    assert "tflops" not in rows[1] and rows[1]["us_p90"] == 5.0
    table = bm.table_rows(rows)
    assert table[0][:3] == [128, "forward", "20.0"] and table[2][-1].startswith("error")
    common.print_table(bm.HEADERS, table)
    # each backward round over its forward mirror, and the all-to-all's share of fwd+bwd
    medians = {"dispatch": 50.0, "combine": 40.0, "combine-bwd": 110.0, "dispatch-bwd": 44.0, "fwd+bwd": 1220.0}
    medians["combine-bwd-y"] = 60.0  # not part of the share of a training step
    full = [bm.phase_row(dict(base, tokens=512), p, [us] * 3) for p, us in medians.items()]
    mirrors = bm.mirror_rows(rows + full)
    assert mirrors[0] == [128] + ["-"] * 13  # no backward round ran at 128, no floor
    assert mirrors[1] == [512, "2.20", "1.10", "1.20", "20.0%"] + ["-"] * 9  # hbm-y and the graph phases did not run
    # the backward of combine over its local floor (hbm-y), and that floor over the dispatch
    with_hbm = full + [bm.phase_row(dict(base, tokens=512), "hbm-y", [55.0] * 3)]
    assert bm.mirror_rows(with_hbm)[0][5:7] == ["2.00", "1.10"]
    # each pair of rounds over the floor of one d+c for the layer's bytes (same floor for both)
    assert bm.pair_over_floor(medians, ("dispatch", "combine"), 30.0) == pytest.approx(3.0)
    assert bm.pair_over_floor(medians, ("combine-bwd", "dispatch-bwd"), 30.0) == pytest.approx(154 / 30)
    assert bm.pair_over_floor({"dispatch": 5.0}, ("dispatch", "combine"), 30.0) is None  # combine did not run
    assert bm.pair_over_floor(medians, ("dispatch", "combine"), None) is None  # no floor
    floor = {"floor_exchange_us": 30.0, "floor_exchange_blocks": 32, "floor_exchange_bytes": 1_835_008}
    measured = [dict(r, **floor) for r in full]
    want = [512, "2.20", "1.10", "1.20", "20.0%", "-", "-", "30.0", "1835.0", "3.00", "5.13", "-", "-", "-"]
    assert bm.mirror_rows(measured) == [want]
    # the graph phases: graph-fwd over the floor, graph-train less graph-fwd (the backward pair) over both
    graphed = measured + [
        dict(bm.phase_row(dict(base, tokens=512), p, [us] * 3), **floor)
        for p, us in (("graph-fwd", 60.0), ("graph-train", 135.0))
    ]
    assert bm.mirror_rows(graphed)[0][-3:] == ["2.00", "2.50", "1.25"]
    assert bm.mirror_rows([r for r in graphed if r["phase"] != "graph-fwd"])[0][-3:] == ["-", "-", "-"]
    # --phases subset: a pair with a phase that did not run shows "-"; a failed floor keeps the bytes
    some = [r for r in measured if r["phase"] in ("dispatch", "combine", "combine-bwd")]
    assert bm.mirror_rows(some)[0][-5:-3] == ["3.00", "-"]
    failed = [dict(r, floor_exchange_bytes=4000, floor_exchange_status="RuntimeError: heap") for r in full]
    assert bm.mirror_rows(failed)[0][7:] == ["-", "4.0", "-", "-", "-", "-", "-"]
    assert bm.floor_notes(failed + measured) == ["T=512: floor not measured: RuntimeError: heap"]
    # a counts spec other than "max" names its case: its own table rows, its own mirror row
    drawn = [dict(r, counts="drawn") for r in measured]
    assert bm.case_of(drawn[0]) == "512 drawn" and bm.case_of(measured[0]) == 512
    assert [m[0] for m in bm.mirror_rows(measured + drawn)] == [512, "512 drawn"]
    assert bm.table_rows(drawn)[0][0] == "512 drawn"
    assert len(bm.MIRROR_HEADERS) == len(mirrors[0])
    common.print_table(bm.MIRROR_HEADERS, mirrors + bm.mirror_rows(measured))
    with tempfile.TemporaryDirectory() as d:
        stem = scaffold.write_results(d, "bench_moe_layer", {"meta": common.metadata(), "config": {}, "rows": rows})
        assert open(stem + ".csv").readline().startswith("tokens,world,phase")
        assert os.path.getsize(stem + ".json") > 0


def test_moe_layer_floor_fields(monkeypatch):
    """layer_floor: the floor for the bytes bench_tokens recorded, as row fields; a failure (the
    heap's allocation raising) and a layer that failed before routing become a status string."""
    import bench_moe_layer as bm

    rows = [{"tokens": 8, "phase": "dispatch", "floor_exchange_bytes": 4000}]
    seen = []

    def floor(ctx, nbytes):
        seen.append(nbytes)
        return {"bytes": nbytes, "us": 9.0, "blocks": 32, "us_p10": 8.0, "us_p90": 10.0}

    monkeypatch.setattr(bm.microbench, "floor_for_bytes", floor)
    assert bm.layer_floor(FakeCtx(), rows) == {
        "floor_exchange_us": 9.0,
        "floor_exchange_blocks": 32,
        "floor_exchange_bytes": 4000,
    }
    assert seen == [4000]

    def fail(ctx, nbytes):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(bm.microbench, "floor_for_bytes", fail)
    assert bm.layer_floor(FakeCtx(), rows) == {"floor_exchange_status": "RuntimeError: out of memory"}
    assert "not measured" in bm.layer_floor(FakeCtx(), [{"tokens": 8, "phase": "dispatch"}])["floor_exchange_status"]
