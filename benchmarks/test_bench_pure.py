"""CPU checks of the parts of the benchmarks that need no GPU and no second process:
statistics, shape parsing, the byte model, the fake GEMM, and the NCCL / symm_mem baselines'
sort-and-unsort logic with the all-to-all simulated in one process.

    python -m pytest benchmarks/test_bench_pure.py      (or: python benchmarks/test_bench_pure.py)
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import baselines as bl  # noqa: E402
import sol_local  # noqa: E402
from fake_gemm import scale_experts, scale_segments  # noqa: E402


def test_quantiles_match_numpy():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 50, 51):
        v = rng.random(n).tolist()
        s = common.summarize(v)
        assert s["median"] == pytest.approx(np.median(v))
        assert s["p10"] == pytest.approx(np.quantile(v, 0.1))
        assert s["p90"] == pytest.approx(np.quantile(v, 0.9))
    assert common.geomean([1, 4, 16]) == pytest.approx(4)


def test_parse_shapes():
    s = common.parse_shapes(common.CHALLENGE_SHAPES)
    assert [(x.experts, x.topk, x.hidden, x.max_tokens) for x in s] == [
        (8, 2, 6144, 16), (64, 6, 2048, 32), (128, 4, 2880, 128), (128, 8, 4096, 256),
        (256, 8, 7168, 256)]
    assert all(x.dtype == torch.bfloat16 and x.seed == 0 for x in s)
    s = common.parse_shapes("8,2,64,4,fp16,7; 16,4,32,8;", default_seed=3)
    assert (s[0].dtype, s[0].seed, s[1].dtype, s[1].seed) == (torch.float16, 7, torch.bfloat16, 3)
    for bad in ("8,2,64", "8,2,64,4,int8", "8,9,64,4", "8,2,64,0"):
        with pytest.raises(ValueError):
            common.parse_shapes(bad)


def test_cli_parses():
    import bench_all2all
    import bench_sweep
    a = bench_all2all.parse_args(["--systems", "nccl,moe_a2a", "--shapes", "8,2,64,4"])
    assert a.system_list == ["nccl", "moe_a2a"] and a.iters == 50 and a.check
    assert not bench_all2all.parse_args(["--no-check"]).check
    with pytest.raises(SystemExit):
        bench_all2all.parse_args(["--iters", "10"])
    with pytest.raises(SystemExit):
        bench_all2all.parse_args(["--systems", "deepep"])
    b = bench_sweep.parse_args(["--tokens", "1,8"])
    assert [s.max_tokens for s in b.shape_list] == [1, 8] and b.shape_list[0].experts == 256


def test_traffic_matrix():
    # world 2, 4 experts (2 per rank). rank 0: token0 -> experts {0, 2}, token1 -> {2, 3}
    # rank 1: token0 -> {0, 1}
    idx = [torch.tensor([[0, 2], [2, 3]]), torch.tensor([[0, 1]])]
    m, p = sol_local.traffic_matrix(idx, 2, 4)
    assert m == [[0, 2], [1, 0]]        # token1 of rank 0 goes to rank 1 once, not twice
    assert p == [[0, 3], [2, 0]]
    assert sol_local.busiest_rank_tokens(m) == 2
    assert sol_local.sol_us(370e3, 370.0, 1.0) == pytest.approx(2.0)


def test_sol_local_agrees_with_moe_a2a_sol():
    sol = common.moe_submodule("sol")
    if sol is None:
        pytest.skip("moe_a2a.sol not importable")
    inputs = _all_inputs(3, 12, 4, 16, 20, seed=5)
    idx = [r[1] for r in inputs]
    m, _ = sol_local.traffic_matrix(idx, 3, 12)
    assert m == sol.traffic_matrix(idx, 12, 3).tolist()
    d, _ = sol.phase_bytes(idx, 12, 3, 16, torch.bfloat16)
    b = sol_local.busiest_rank_tokens(m) * 16 * 2
    assert sol_local.sol_us(b, 300.0, 2.0) == pytest.approx(
        sol.sol_time_us(d.bytes_out, d.bytes_in, 300.0, 300.0, 2.0))


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
        assert torch.equal(ex, torch.cat(want))                          # payload exact
        back = bl.nccl_ungroup(ex * (1 + d), order2)
        for s, part in enumerate(torch.split(back, rc.sum(1).tolist())):
            rets[s][d] = part
    for s, ((x, idx, w), (order, _)) in enumerate(zip(inputs, plans)):
        out = bl.reduce_pairs(torch.cat(rets[s]), order, w, x.dtype)
        ref = common.reference().moe_reference(inputs, s, e, world)
        torch.testing.assert_close(out.float(), ref.float(), rtol=bl.RTOL, atol=bl.ATOL)
        if common.moe_submodule("reference") is not None:  # not the stand-in
            assert torch.equal(out, ref)   # same fp32 order k = 0..K-1 as the reference


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
                rows.append(inps[s][beg:beg + n])
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
        scale_segments(outs[d], outs[d], off, sp, 7, 1 + d)
    for s, ((x, idx, w), o) in enumerate(zip(inputs, orders)):
        # _offset twin: chunk (le, s) of owner d returns to s in global-expert order
        ret = torch.cat([outs[d][sos[d][1][le * world + s]:][: sos[d][0][le * world + s]]
                         for d in range(world) for le in range(ne)])
        out = bl.reduce_pairs(ret, o, w, x.dtype)
        ref = common.reference().moe_reference(inputs, s, e, world)
        torch.testing.assert_close(out.float(), ref.float(), rtol=bl.RTOL, atol=bl.ATOL)


def test_symm_mem_limits():
    ok = bl.symm_mem_unsupported(2, common.Shape(8, 2, 64, 4))
    assert "experts/rank" in bl.symm_mem_unsupported(2, common.Shape(64, 6, 2048, 32)) or ok


def test_scale_experts_torch_fallback():
    x = torch.randn(3, 5, 8).to(torch.bfloat16)
    n = torch.tensor([0, 5, 2], dtype=torch.int32)
    y = scale_experts(x, n, 3, out=x.clone())
    for e in range(3):
        torch.testing.assert_close(y[e, : n[e]], x[e, : n[e]] * 3, rtol=0, atol=0)
        torch.testing.assert_close(y[e, n[e]:], x[e, n[e]:], rtol=0, atol=0)


def test_scale_segments_triton_interpreter():
    """The Triton kernel under TRITON_INTERPRET=1 (CPU), in a child so the flag is set
    before triton loads."""
    pytest.importorskip("triton")
    code = r"""
import sys, torch
sys.path.insert(0, %r)
import fake_gemm
fake_gemm.backend = lambda device: "triton"
x = torch.randn(9, 1500).to(torch.bfloat16)
y = torch.full_like(x, 7.0)
start = torch.tensor([0, 2, 2, 6], dtype=torch.int64)
count = torch.tensor([2, 0, 3, 3], dtype=torch.int32)
fake_gemm.scale_segments(x, y, start, count, 3, 4)
rows = [0, 1, 2, 3, 4, 6, 7, 8]
assert torch.equal(y[rows], x[rows] * 4), "scaled rows"
assert torch.equal(y[5], torch.full_like(y[5], 7.0)), "row outside every segment untouched"
print("ok")
""" % os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_fallback_reference_matches_loop():
    import fallback_ref
    inputs = [fallback_ref.generate_rank_inputs(r, 2, 8, 2, 16, 5, torch.float16, 4)
              for r in range(2)]
    x, idx, w = inputs[1]
    assert idx.dtype == torch.int32 and w.dtype == torch.float32
    assert all(len(set(row.tolist())) == 2 for row in idx)          # distinct experts
    out = fallback_ref.moe_reference(inputs, 1, 8, 2)
    for t in range(x.shape[0]):
        acc = sum(w[t, k] * (x[t] * (1 + idx[t, k].item() // 4)).float() for k in range(2))
        torch.testing.assert_close(out[t].float(), acc.to(x.dtype).float())


def test_report_and_outputs():
    import bench_all2all as ba
    rows = []
    for s in ("E8-K2-H64-T4", "E16-K2-H64-T4"):
        for sysname, t in (("nccl", 500.0), ("moe_a2a", 50.0)):
            for ph in ba.PHASES:
                rows.append({"shape": s, "system": sysname, "phase": ph, "tokens_per_rank": 3.0,
                             "status": "ok", "check": "pass", "us_median": t, "us_p10": t * .9,
                             "us_p90": t * 1.1, "GBps": 10.0, "x_sol": t / 10, "sol_us": 10.0,
                             "bytes": 1e5})
        rows += [{"shape": s, "system": "symm_mem", "phase": ph, "tokens_per_rank": 3.0,
                  "status": "unsupported: 32 experts/rank > 16"} for ph in ba.PHASES]
    ba.add_vs_nccl(rows)
    assert rows[3]["vs_nccl"] == pytest.approx(10.0)
    ba.print_report(rows, {"B_GBps": 370.0, "B_source": "test", "L_us": 2.0}, harness=True)
    with tempfile.TemporaryDirectory() as d:
        ba.plot(rows, os.path.join(d, "a.png"))
        common.write_csv(os.path.join(d, "a.csv"), rows)
        common.write_json(os.path.join(d, "a.json"), {"rows": rows, "meta": common.metadata()})
        if common.pyplot() is not None:
            assert os.path.getsize(os.path.join(d, "a.png")) > 0
        assert open(os.path.join(d, "a.csv")).readline().startswith("shape,")


def test_moe_layer_bench_cli_and_sizing():
    import bench_moe_layer as bm
    a = bm.parse_args([])
    assert a.token_list == [128, 512, 2048] and (a.experts, a.topk, a.hidden, a.ffn) == (256, 8, 7168, 2048)
    assert a.dtype_t == torch.bfloat16 and a.layout == "packed" and a.phase_list == list(bm.PHASES)
    a = bm.parse_args(["--tokens", "4,8", "--shape", "16,2,64,32", "--phases", "dispatch,fwd+bwd", "--dtype",
                       "fp32", "--layout", "padded", "--no-check"])
    assert a.phase_list == ["dispatch", "fwd+bwd"] and a.dtype_t == torch.float32 and not a.check
    for bad in (["--tokens", "0"], ["--shape", "8,9,64,32"], ["--shape", "8,2,64"], ["--phases", "attention"],
                ["--iters", "3"]):
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


def test_moe_layer_bench_report():
    import bench_moe_layer as bm
    base = {"tokens": 128, "world": 2}
    rows = [bm.phase_row(base, "forward", [10.0, 20.0, 30.0], flops=6e6),
            bm.phase_row(base, "dispatch", [5.0] * 4),
            dict(base, phase="fwd+bwd", status="error: RuntimeError: capacity")]
    assert rows[0]["us_median"] == 20.0 and rows[0]["tflops"] == pytest.approx(6e6 / 20e6)
    assert "tflops" not in rows[1] and rows[1]["us_p90"] == 5.0
    table = bm.table_rows(rows)
    assert table[0][:3] == [128, "forward", "20.0"] and table[2][-1].startswith("error")
    common.print_table(bm.HEADERS, table)
    with tempfile.TemporaryDirectory() as d:
        stem = bm.write_outputs(d, rows, common.metadata(), {"tokens": "128"})
        assert open(stem + ".csv").readline().startswith("tokens,world,phase")
        assert os.path.getsize(stem + ".json") > 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
