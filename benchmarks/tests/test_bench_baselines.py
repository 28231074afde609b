"""bench_all2all.py's routing rows and the speed-of-light floor, and the baselines' logic with the
all-to-all simulated in one process: NCCL's and symm_mem's sort and unsort, unequal and empty
ranks, gather_rows, the input pool, and how each system's status is reported.

CPU only (no GPU, no second rank): python -m pytest benchmarks/tests
"""

import baselines as bl
import common
import pytest
import torch
from fake_gemm import scale_segments
from fakes import FakeCtx, FakeCtxOfThree, FakePool


def _routing(monkeypatch, entries, micro):
    import bench_all2all as ba

    monkeypatch.setattr(ba.dist, "all_reduce", lambda t, group=None: t.mul_(2))  # 2 ranks, same T
    return ba.Routing(FakeCtx(), common.Shape(4, 2, 1000, 4, torch.float16), FakePool(entries), micro)


def test_routing_rows_use_moe_a2a_sol(monkeypatch):
    """Routing / phase_row / graph_fields on the closed-form case of tests/python/cpu/test_sol.py:
    hidden 1000 fp16 (2000 bytes a row), link 4000 bytes busiest, local 18000 (dispatch) and
    34000 (combine) bytes; B = 2 GB/s, B_hbm = 10 GB/s, L = 1 us."""
    import bench_all2all as ba

    entry = [torch.tensor([[0, 1], [0, 2]]), torch.tensor([[3, 2], [1, 3], [2, 0]])]
    micro = {"B_GBps": 2.0, "B_hbm_GBps": 10.0, "L_us": 1.0}
    r = _routing(monkeypatch, [entry] * 8, micro)
    assert r.sol("dispatch", 0) == pytest.approx(3.0) and r.sol("combine", 3) == pytest.approx(4.4)
    assert r.sol("pipeline", 5) == pytest.approx(7.4) == r.sol("dispatch+combine", 1)
    assert r.bound("dispatch") == "link" and r.bound("combine") == "local"
    assert r.bound("dispatch+combine") == "link/local"
    assert r.moved("dispatch", 0) == r.moved("combine", 9) == 4000 and r.moved("pipeline", 0) == 8000
    assert r.pairs[0] == 3 and r.total[0] == 3  # rows
    assert r.rows_bytes("combine", 3) == 3 * 2000 and r.rows_bytes("dispatch+combine", 3) == 2 * 3 * 2000
    assert r.tokens_per_rank == pytest.approx(2.0)
    row = ba.phase_row([7.4 * 2] * 50, r, 10, "pipeline")
    assert row["x_sol"] == pytest.approx(2.0) and row["bytes"] == 8000 and row["sol_bound"] == "link/local"
    assert row["GBps"] == pytest.approx(8000 / 14.8e3)
    assert ba.phase_row([6.0] * 50, r, 10, "dispatch")["x_sol"] == pytest.approx(2.0)
    g = ba.graph_fields([14.8] * 20, r, 64, "dispatch+combine")
    assert g["graph_x_sol"] == pytest.approx(2.0) and g["graph_us_median"] == 14.8 and g["graph_replays"] == 20
    assert r.phase_bytes() == 4000


def test_floor_bytes_is_one_rule():
    """The floor's bytes each way of one phase: per entry the mean of dispatch's and combine's
    busiest GPU, median over the entries; Routing.phase_bytes (bench_all2all, bench_graph) and
    routes_floor_bytes (bench_moe_layer, from the gathered expert ids) give the same number."""
    import microbench

    assert microbench.floor_bytes([10, 20, 30], [30, 40, 10]) == 20  # means 20, 30, 20
    entry = [torch.tensor([[0, 1], [0, 2]]), torch.tensor([[3, 2], [1, 3], [2, 0]])]
    assert microbench.routes_floor_bytes([entry] * 3, 4, 2, 1000, torch.float16) == 4000
    fp8 = microbench.routes_floor_bytes([entry], 4, 2, 1000, torch.float16, dispatch_dtype=torch.float8_e4m3fn)
    assert fp8 == (2064 + 4000) // 2  # test_routing_fp8_dispatch's phase_bytes()
    empty = [torch.zeros(0, 2, dtype=torch.int64)] * 2
    assert microbench.routes_floor_bytes([empty, entry, entry], 4, 2, 1000, torch.float16) == 4000
    assert microbench.floor_fields({"bytes": 8, "us": 5.0, "blocks": 32}) == {
        "floor_exchange_us": 5.0,
        "floor_exchange_blocks": 32,
        "floor_exchange_bytes": 8,
    }
    assert microbench.floor_fields({"bytes": 8, "error": "no extension"}) == {"floor_exchange_status": "no extension"}


def test_routing_fp8_dispatch(monkeypatch):
    """With fp8 dispatch the same case moves 1032-byte rows to the experts (1000 fp8 bytes and 8
    scales) and 2000-byte rows back: dispatch is link-bound at 2064 bytes, combine as before."""
    import bench_all2all as ba

    entry = [torch.tensor([[0, 1], [0, 2]]), torch.tensor([[3, 2], [1, 3], [2, 0]])]
    micro = {"B_GBps": 2.0, "B_hbm_GBps": 10.0, "L_us": 1.0}
    monkeypatch.setattr(ba.dist, "all_reduce", lambda t, group=None: t.mul_(2))
    shape = common.Shape(4, 2, 1000, 4, torch.float16)
    r = ba.Routing(FakeCtx(), shape, FakePool([entry] * 8), micro, dispatch_dtype=torch.float8_e4m3fn)
    assert r.moved("dispatch", 0) == 2064 and r.moved("combine", 0) == 4000 and r.moved("pipeline", 0) == 6064
    assert r.sol("dispatch", 0) == pytest.approx(1.0 + 1.032) and r.sol("combine", 0) == pytest.approx(4.4)
    assert r.rows_bytes("dispatch+combine", 3) == 3 * (1032 + 2000) and r.phase_bytes() == 3032
    g = ba.graph_fields([12.864] * 20, r, 64, "dispatch+combine")  # twice the SoL, 2.032 + 4.4 us
    assert g["graph_x_sol"] == pytest.approx(2.0) and g["graph_GBps"] == pytest.approx(6064 / 12.864e3)


def _all_inputs(world, e, k, h, t, seed=1):
    shape = common.Shape(e, k, h, t)
    return [common.make_inputs(shape, r, world, seed, "cpu") for r in range(world)]


@pytest.mark.parametrize("world,e,k", [(1, 8, 2), (2, 8, 2), (3, 12, 4), (4, 64, 6)])
def test_nccl_logic_simulated(world, e, k):
    """NcclSystem's steps with both all_to_all_singles done by hand: the counts exchange
    (equal splits of the [E] counts) and the rows (split by destination rank)."""
    h, epr = 32, e // world
    inputs = _all_inputs(world, e, k, h, 9)
    plans = [bl.nccl_plan(idx, e) for _, idx, _ in inputs]
    sends = [x.index_select(0, order // k) for (x, _, _), (order, _) in zip(inputs, plans)]
    rows_to = [c.view(world, epr).sum(1).tolist() for _, c in plans]
    chunks = [torch.split(send, r) for send, r in zip(sends, rows_to)]
    rets = [[None] * world for _ in range(world)]
    for d in range(world):
        recv = torch.cat([chunks[s][d] for s in range(world)])
        rc = torch.stack([plans[s][1].view(world, epr)[d] for s in range(world)])  # [src, epr]
        ex, ecount, order2 = bl.nccl_group(recv, rc)
        assert ecount.tolist() == rc.sum(0).tolist()
        # expected: expert-major, then source rank, then the source's sorted pair order
        want = []
        for le in range(epr):
            for s, ((x, idx, _), (order, _)) in enumerate(zip(inputs, plans)):
                ge = idx.reshape(-1)[order].long()
                want.append(x[order[ge == d * epr + le] // k])
        assert torch.equal(ex, torch.cat(want))  # payload exact
        back = bl.nccl_ungroup(ex * (1 + d), order2)
        for s, part in enumerate(torch.split(back, rc.sum(1).tolist())):
            rets[s][d] = part
    for s, ((x, idx, w), (order, _)) in enumerate(zip(inputs, plans)):
        out = bl.reduce_pairs(torch.cat(rets[s]), order, w, x.dtype)
        ref = common.reference().moe_reference(inputs, s, e, world)
        torch.testing.assert_close(out.float(), ref.float(), rtol=bl.RTOL, atol=bl.ATOL)
        assert torch.equal(out, ref)  # same fp32 order k = 0..K-1 as the reference


def _vdev_2d_model(inps, in_splits, world, ne):
    """Model of all_to_all_vdev_2d as torch's source documents it (rank-major chunks in,
    expert-major out, offsets = exclusive scan with each expert rounded up to >= 1 row)."""
    outs, sos = [], []
    for d in range(world):
        rows, splits, offs, pos = [], [], [], 0
        for le in range(ne):
            start = pos
            for s in range(world):
                e = d * ne + le
                beg = sum(in_splits[s][:e])
                n = in_splits[s][e]
                rows.append(inps[s][beg : beg + n])
                splits.append(n)
                offs.append(pos)
                pos += n
            if pos == start:  # major_align=1 turns an empty expert into one padding row
                rows.append(torch.zeros(1, inps[0].shape[1], dtype=inps[0].dtype))
                pos += 1
        outs.append(torch.cat(rows))
        sos.append((torch.tensor(splits), torch.tensor(offs)))
    return outs, sos


def test_symm_mem_logic_simulated():
    world, e, k, h = 2, 8, 3, 16
    ne = e // world
    inputs = _all_inputs(world, e, k, h, 7, seed=3)
    orders = [torch.argsort(idx.reshape(-1).long(), stable=True) for _, idx, _ in inputs]
    inps = [x[o // k] for (x, _, _), o in zip(inputs, orders)]
    splits = [torch.bincount(idx.reshape(-1).long(), minlength=e).tolist() for _, idx, _ in inputs]
    outs, sos = _vdev_2d_model(inps, splits, world, ne)
    for d in range(world):  # the fake GEMM on segments, as SymmMemSystem.fake_gemm runs it
        sp, off = sos[d]
        scale_segments(outs[d], outs[d], off, sp, 1 + d)
    for s, ((x, idx, w), o) in enumerate(zip(inputs, orders)):
        # _offset twin: chunk (le, s) of owner d returns to s in global-expert order
        ret = torch.cat(
            [
                outs[d][sos[d][1][le * world + s] :][: sos[d][0][le * world + s]]
                for d in range(world)
                for le in range(ne)
            ]
        )
        out = bl.reduce_pairs(ret, o, w, x.dtype)
        ref = common.reference().moe_reference(inputs, s, e, world)
        torch.testing.assert_close(out.float(), ref.float(), rtol=bl.RTOL, atol=bl.ATOL)


def test_symm_mem_limits():
    ok = bl.symm_mem_unsupported(2, common.Shape(8, 2, 64, 4))
    assert "experts/rank" in bl.symm_mem_unsupported(2, common.Shape(64, 6, 2048, 32)) or ok


def _fake_all_gather(monkeypatch, per_rank):
    """dist.all_gather as gather_rows calls it, with per_rank[r] as rank r's tensor: first the
    row counts, then the rows padded to the largest count."""
    calls = []

    def all_gather(outs, t, group=None):
        calls.append(t.shape)
        for r, o in enumerate(outs):
            if len(calls) == 1:
                o.fill_(per_rank[r].shape[0])
            else:
                o.zero_()
                o[: per_rank[r].shape[0]].copy_(per_rank[r])

    monkeypatch.setattr(common.dist, "all_gather", all_gather)
    return calls


def test_gather_rows_unequal_and_empty(monkeypatch):
    """gather_rows with a different row count per rank, 0 included, and with every rank empty
    (then no second, zero-size gather)."""
    ctx = FakeCtxOfThree()
    per_rank = [torch.tensor([[1, 2]]), torch.zeros(0, 2, dtype=torch.int64), torch.tensor([[3, 4], [5, 6], [7, 8]])]
    calls = _fake_all_gather(monkeypatch, per_rank)
    out = common.gather_rows(ctx, per_rank[ctx.rank])
    assert [o.shape[0] for o in out] == [1, 0, 3] and len(calls) == 2
    assert all(torch.equal(o, p) for o, p in zip(out, per_rank))
    empty = [torch.zeros(0, 2, dtype=torch.int32)] * 3
    calls = _fake_all_gather(monkeypatch, empty)
    out = common.gather_rows(ctx, empty[ctx.rank])
    assert len(calls) == 1 and [tuple(o.shape) for o in out] == [(0, 2)] * 3 and out[0].dtype == torch.int32


def test_input_pool_per_rank_counts(monkeypatch):
    """InputPool(num_tokens=[...]): this rank's entry of the list; counts[j][r] from the gathered
    routing. With None every entry draws its own count."""
    shape = common.Shape(8, 2, 16, 32)

    def gather(ctx, t):  # every rank's routing of this entry, regenerated from its seed
        j = next(j for j in range(16) if torch.equal(t, pool_idx(ctx.rank, j)))
        return [pool_idx(r, j) for r in range(ctx.world)]

    def pool_idx(r, j):
        return common.make_inputs(shape, r, 2, common.pool_seed(shape, j), "cpu", tokens[r])[1]

    monkeypatch.setattr(common, "gather_rows", gather)
    ctx = FakeCtx()
    for tokens in ([0, 16], [5, 5]):
        pool = common.InputPool(ctx, shape, 8, num_tokens=tokens)
        assert all(it[0].shape == (tokens[0], 16) for it in pool.items)
        assert pool.counts == [tokens] * 8 and pool.routing(9)[1].shape == (tokens[1], 2)
    tokens = [None, None]
    pool = common.InputPool(ctx, shape, 8)
    assert len({c[0] for c in pool.counts}) > 1 and all(1 <= c[0] <= 32 for c in pool.counts)


def test_routing_with_an_empty_rank(monkeypatch):
    """Routing (SoL, bytes, floor bytes) from every rank's gathered routing when rank 0 has no
    token: rank 1's tokens [3, 2], [1, 3], [2, 0] reach rank 0 twice (experts 0..1 live there),
    2 rows of 2000 bytes each way, nothing from rank 0."""
    entry = [torch.zeros(0, 2, dtype=torch.int64), torch.tensor([[3, 2], [1, 3], [2, 0]])]
    micro = {"B_GBps": 2.0, "B_hbm_GBps": 10.0, "L_us": 1.0}
    r = _routing(monkeypatch, [entry] * 8, micro)
    assert r.moved("dispatch", 0) == r.moved("combine", 0) == 4000 and r.phase_bytes() == 4000
    assert r.total[0] == 2 and r.pairs[0] == 2 and r.sol("dispatch", 0) > 1.0
    empty = [torch.zeros(0, 2, dtype=torch.int64)] * 2
    r = _routing(monkeypatch, [empty] * 8, micro)
    assert r.phase_bytes() == 0 and r.sol("dispatch+combine", 0) == pytest.approx(2.0)
    assert r.bound("dispatch") == "latency"


def test_nccl_steps_with_zero_tokens():
    """The NCCL baseline's pure steps on a rank with 0 tokens: empty plan, empty output."""
    idx = torch.zeros(0, 2, dtype=torch.int32)
    order, counts = bl.nccl_plan(idx, 8)
    assert order.numel() == 0 and counts.tolist() == [0] * 8
    out = bl.reduce_pairs(torch.zeros(0, 4, dtype=torch.bfloat16), order, torch.zeros(0, 2), torch.bfloat16)
    assert out.shape == (0, 4) and out.dtype == torch.bfloat16


def test_bench_systems_reports_each_system(monkeypatch):
    """bench_all2all.bench_systems, the per-system loop of bench_all2all.py and bench_sweep.py:
    a system that cannot be built, one whose check fails, and one that raises each get a row
    per phase saying so, and the loop goes on."""
    import types

    import bench_all2all as ba

    closed = []

    class Fake:
        note, graph_note = "", ""

        def __init__(self, name, ok=True, boom=False):
            self.name, self.ok, self.boom = name, ok, boom

        def check(self, inputs):
            if self.boom:
                raise RuntimeError("boom")
            return self.ok, 0.5

        def close(self):
            closed.append(self.name)

    built = {
        "reference": (None, "unsupported: test"),
        "nccl": (Fake("nccl"), ""),
        "symm_mem": (Fake("s", boom=True), ""),
    }
    built["moe_a2a"] = (Fake("moe_a2a", ok=False), "")
    monkeypatch.setattr(ba, "build_system", lambda name, ctx, shape, args: built[name])
    monkeypatch.setattr(ba, "measure", lambda *a: {ph: [1.0] for ph in ba.PHASES})
    monkeypatch.setattr(ba, "measure_graph_or_error", lambda *a: {})
    monkeypatch.setattr(ba, "shape_floor", lambda *a: None)
    monkeypatch.setattr(
        ba,
        "system_rows",
        lambda info, system, times, gtimes, routing, args, tokens, check, status: [
            dict(info, phase=ph, status=status, check=check, us_median=10.0) for ph in times
        ],
    )
    args = types.SimpleNamespace(system_list=list(ba.ALL_SYSTEMS), iters=50, warmup=1)
    shape = common.Shape(8, 2, 64, 4)
    rows = ba.bench_systems(None, shape, args, None, None, None, lambda n: {"shape": "s", "system": n}, ["inputs"])
    status = {(r["system"], r["phase"]): r["status"] for r in rows}
    assert len(rows) == 4 * len(ba.PHASES)
    assert status[("reference", "pipeline")] == "unsupported: test"
    assert status[("nccl", "dispatch")] == "ok" and status[("moe_a2a", "combine")] == "wrong result"
    assert status[("symm_mem", "pipeline")] == "error: RuntimeError: boom"
    assert closed == ["nccl", "s", "moe_a2a"]
    assert next(r for r in rows if r["system"] == "moe_a2a")["vs_nccl"] == pytest.approx(1.0)
