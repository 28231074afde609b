"""bench_graph.py's and bench_host.py's arguments: graph iterations, the A/B shape set, per-rank
token counts (specs, issue 35's preset, drawn counts), capacity; bench_host's call sequences.

CPU only (no GPU, no second rank): python -m pytest benchmarks/tests
"""

import common
import pytest


def test_bench_host_cli_and_sequences():
    import bench_host

    a = bench_host.parse_args([])
    assert a.iters >= 50 and [s.max_tokens for s in common.parse_shapes(a.shapes)] == [1, 128]
    with pytest.raises(SystemExit):
        bench_host.parse_args(["--iters", "10"])
    with pytest.raises(SystemExit):
        bench_host.parse_args(["--sync-every", "0"])
    # every call a sequence times is reported once, under its sequence
    calls = [c for seq in bench_host.SEQUENCES.values() for c in seq]
    assert len(calls) == len(set(calls)) and "backward" in bench_host.SEQUENCES["training"]


def test_graph_iters_and_cli():
    import bench_all2all as ba

    a = ba.parse_args([])
    assert a.graph and a.floor and a.layout == "padded" and a.graph_replays == 20
    assert ba.graph_iters(a, 256) == 64 and ba.graph_iters(a, 257) == 16
    a = ba.parse_args(["--graph-iters", "24", "--no-floor", "--layout", "packed"])
    assert ba.graph_iters(a, 4096) == 24 and not a.floor and a.layout == "packed"
    assert ba.parse_args(["--no-graph", "--pool", "4"]).pool == 4
    for bad in (["--pool", "4"], ["--graph-replays", "0"], ["--graph-iters", "-1"]):
        with pytest.raises(SystemExit):
            ba.parse_args(bad)


def test_time_graph_rejects_too_few_inputs():
    with pytest.raises(ValueError):
        common.time_graph(None, lambda i: None, 7, 64, 20)


def test_bench_graph_ab_shape_set():
    """--shapes ab: the set tools/graph_ab.sh and tools/mps_proxy.sh time (challenge + DeepSeek-V3 T=1, 128)."""
    import bench_graph

    labels = [s.label for s in bench_graph.parse_args(["--shapes", "ab"]).shape_list]
    assert labels[:5] == [s.label for s in common.parse_shapes(common.CHALLENGE_SHAPES)]
    assert labels[5:] == ["E256-K8-H7168-T1", "E256-K8-H7168-T128"]


def test_count_specs():
    """--counts specs (common.counts_for_shape): max, drawn, a/b[/c...] with 0 allowed and each
    entry <= the shape's max tokens, normalized and deduplicated; errors name the spec and shape."""
    t32 = common.Shape(64, 6, 2048, 32)
    assert common.counts_for_shape("max", t32) == ["max"]
    assert common.counts_for_shape(" 1/16 ; drawn;0/32;16/16;01/16;max;", t32) == [
        "1/16",
        "drawn",
        "0/32",
        "16/16",
        "max",
    ]
    assert common.counts_for_shape("8", t32) == ["8"] and common.counts_for_shape("1/2/3", t32) == ["1/2/3"]
    assert common.count_entries("0/16") == [0, 16] and common.count_entries("drawn") is None
    for bad in ("x", "1/", "/1", "-1/4", "1.5/2", "1/16 x", "issue35", ""):
        with pytest.raises(ValueError, match="want max, drawn"):
            common.count_entries(bad)
    with pytest.raises(ValueError, match=r"'1/33'.*E64-K6-H2048-T32"):
        common.counts_for_shape("max;1/33", t32)
    with pytest.raises(ValueError, match="no count spec"):
        common.counts_for_shape(" ; ", t32)
    # rank r gets entry r % n; max is every rank at the shape's max; drawn leaves it to the generator
    assert common.spec_num_tokens("1/16", 4, 32) == [1, 16, 1, 16]
    assert common.spec_num_tokens("1/2/3", 2, 32) == [1, 2]
    assert common.spec_num_tokens("max", 3, 32) == [32, 32, 32]
    assert common.spec_num_tokens("drawn", 2, 32) is None
    assert common.rank_count([1, 16], 1, 2) == 16 and common.rank_count(None, 1, 2) is None
    assert common.rank_count(7, 1, 2) == 7
    with pytest.raises(ValueError):
        common.rank_count([1, 16, 4], 0, 2)


def test_issue35_preset():
    """The issue-35 preset per shape: only pairs whose entries fit, then drawn and 1/1."""
    small = ["1/16", "16/1", "4/16", "0/16", "16/16"]
    mid = ["1/128", "128/1", "128/128"]
    assert common.issue35_counts(1) == common.issue35_counts(15) == ["drawn", "1/1"]
    assert common.issue35_counts(16) == common.issue35_counts(32) == small + ["drawn", "1/1"]
    assert common.issue35_counts(256) == small + mid + ["drawn", "1/1"]
    assert common.issue35_counts(4096) == small + mid + ["64/4096", "4096/4096", "drawn", "1/1"]
    for t in (1, 16, 31, 128, 1000, 4096, 8192):
        for spec in common.issue35_counts(t):
            assert spec == "drawn" or max(common.count_entries(spec)) <= t
        shape = common.Shape(8, 2, 64, t)
        assert common.counts_for_shape("issue35", shape) == common.issue35_counts(t)
    # a preset next to specs it also holds: each spec once
    assert common.counts_for_shape("max;issue35;drawn", common.Shape(8, 2, 64, 16)) == ["max"] + small + [
        "drawn",
        "1/1",
    ]


def test_bench_graph_counts_cli():
    import bench_graph

    a = bench_graph.parse_args([])
    assert a.counts == "max" and a.count_list == [["max"]] * len(a.shape_list)
    a = bench_graph.parse_args(["--shapes", "64,6,2048,32;8,2,6144,16;256,8,7168,4096", "--counts", "issue35"])
    assert a.count_list[0] == a.count_list[1] == common.issue35_counts(16)
    assert a.count_list[2][-4:] == ["64/4096", "4096/4096", "drawn", "1/1"]
    for bad in (["--shapes", "8,2,6144,16", "--counts", "1/32"], ["--counts", "1/x"], ["--counts", ";"]):
        with pytest.raises(SystemExit):
            bench_graph.parse_args(bad)
    assert bench_graph.row_label("E8-K2-H6144-T16", "max") == "E8-K2-H6144-T16"
    assert bench_graph.row_label("E8-K2-H6144-T16", "1/16") == "E8-K2-H6144-T16 1/16"
    assert bench_graph.counts_cell({"counts": "0/16"}) == "0/16" and bench_graph.counts_cell({}) == "max"
    assert bench_graph.counts_cell({"counts": "drawn", "rank_tokens": [9.5, 17.25]}) == "drawn (9.5/17.2)"


def test_bench_graph_capacity_cli():
    """--capacity: the engine's tokens a rank for every shape (0: each shape's T), never below a
    shape's T (the engine could not take that shape's batch)."""
    import bench_graph

    assert bench_graph.parse_args([]).capacity == 0
    assert bench_graph.parse_args(["--shapes", "ab", "--capacity", "4096"]).capacity == 4096
    with pytest.raises(SystemExit):
        bench_graph.parse_args(["--shapes", "256,8,7168,128", "--capacity", "64"])


def test_drawn_counts_differ_per_rank_and_entry():
    """num_tokens=None: each (pool entry, rank) draws its own T in [1, max] (the reference's
    stream is seeded by the entry's seed and the rank), the same on every call."""
    shape = common.Shape(8, 2, 16, 32)
    counts = {
        (j, r): common.make_inputs(shape, r, 2, common.pool_seed(shape, j), "cpu").num_tokens
        for j in range(8)
        for r in range(2)
    }
    assert all(1 <= t <= 32 for t in counts.values()) and len(set(counts.values())) > 2
    assert any(counts[(j, 0)] != counts[(j, 1)] for j in range(8))
    assert counts[(3, 1)] == common.make_inputs(shape, 1, 2, common.pool_seed(shape, 3), "cpu").num_tokens
    assert common.make_inputs(shape, 1, 2, common.pool_seed(shape, 3), "cpu", num_tokens=0).x.shape == (0, 16)


def test_bench_graph_fp8_given_runs_and_twins():
    """--fp8-given: after each spec's fp8 run, one with rows quantized before the call; each fp8 row,
    quantizing or given, is compared with the token-dtype row before it. It needs --fp8."""
    import bench_graph

    with pytest.raises(SystemExit):
        bench_graph.parse_args(["--fp8-given"])
    a = bench_graph.parse_args(["--shapes", "8,2,6144,16;256,8,7168,4096", "--counts", "max;drawn"])
    assert [r[2:] for r in bench_graph.graph_runs(a)] == [(None, False)] * 4
    a = bench_graph.parse_args(
        ["--shapes", "8,2,6144,16;256,8,7168,4096", "--counts", "max;drawn", "--fp8", "e4m3fn", "--fp8-given"]
    )
    runs = bench_graph.graph_runs(a)
    assert [(r[0].max_tokens, r[1], r[2], r[3]) for r in runs] == [
        (t, c, fp8, given)
        for t in (16, 4096)
        for c in ("max", "drawn")
        for fp8, given in ((None, False), ("e4m3fn", False), ("e4m3fn", True))
    ]
    labels = [bench_graph.dispatch_label(fp8, given) if fp8 else "bfloat16" for _, _, fp8, given in runs[:3]]
    assert labels == ["bfloat16", "e4m3fn", "e4m3fn given"]
    rows = [{"dispatch_dtype": d, "n": i} for i, d in enumerate(labels * 2)]
    assert [(f["n"], b["n"]) for f, b in bench_graph.fp8_twins(rows)] == [(1, 0), (2, 0), (4, 3), (5, 3)]


def test_given_fp8_pool_quantizes_out_of_the_timed_region():
    """GivenFp8Pool: each entry as dispatch(x_fp8, idx, w, x_scale) takes it, the bytes of
    moe_a2a.reference.quantize_fp8; the routing and counts are the pool's."""
    import bench_graph
    import torch

    from moe_a2a.reference import quantize_fp8

    class Pool:
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.items = [
                (torch.randn(3, 300, generator=g).bfloat16(), torch.zeros(3, 2, dtype=torch.int64), torch.ones(3, 2))
                for _ in range(2)
            ]
            self.counts = [[3, 3], [3, 3]]

        def routing(self, i):
            return ("routing", i)

    pool = Pool()
    given = bench_graph.GivenFp8Pool(pool, torch.float8_e4m3fn)
    assert len(given) == 2 and given.counts is pool.counts and given.routing(1) == ("routing", 1)
    for i, (x, idx, w) in enumerate(pool.items):
        q, gidx, gw, scale = given.get(i + 2)  # cycles, as InputPool.get does
        want_q, want_scale = quantize_fp8(x, torch.float8_e4m3fn)
        assert q.dtype == torch.float8_e4m3fn and scale.shape == (3, 3)
        assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(scale, want_scale)
        assert gidx is idx and gw is w
