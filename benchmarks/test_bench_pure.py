"""CPU checks of the parts of the benchmarks that need no GPU and no second process:
statistics, shape parsing, the speed-of-light rows, the fake GEMM (torch fallback and the
Triton kernel under the interpreter), the report, the metadata, the multicast-off import order,
and the NCCL / symm_mem baselines' sort-and-unsort logic with the all-to-all simulated in one
process.

    python -m pytest benchmarks/test_bench_pure.py      (or: python benchmarks/test_bench_pure.py)
"""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The in-tree package (pure-python parts), ahead of any installed moe_a2a: these tests check
# this checkout's sol / reference, as tests/python/cpu/conftest.py does.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import baselines as bl  # noqa: E402
import common  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from fake_gemm import scale_experts, scale_packed, scale_segments  # noqa: E402


def test_quantiles_match_numpy():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 50, 51):
        v = rng.random(n).tolist()
        s = common.summarize(v)
        assert s["median"] == pytest.approx(np.median(v))
        assert s["p10"] == pytest.approx(np.quantile(v, 0.1))
        assert s["p90"] == pytest.approx(np.quantile(v, 0.9))
    assert common.geomean([1, 4, 16]) == pytest.approx(4)


def test_error_line_is_one_line(capsys):
    # A CUDA error's message: one line of what went wrong, then lines of advice (session 46's graph decode).
    cuda = RuntimeError(
        "CUDA error: operation failed due to a previous error during capture\nSearch for ...\nFor debugging"
    )
    assert common.error_line(cuda) == (
        "RuntimeError: CUDA error: operation failed due to a previous error during capture ..."
    )
    assert common.error_line(ValueError("short")) == "ValueError: short"
    assert common.error_line(KeyError()) == "KeyError: "
    long = common.error_line(RuntimeError("x" * 500))
    assert long == "RuntimeError: " + "x" * common.ERROR_LINE_CHARS + " ..."
    assert common.error_status(cuda, "graph decode") == "error: " + common.error_line(cuda)
    assert common.error_status(ValueError("no"), "building nccl", prefix="unsupported") == "unsupported: ValueError: no"
    err = capsys.readouterr().err  # the whole message, for the log
    assert "rank 0: graph decode: RuntimeError: CUDA error" in err and "For debugging" in err
    assert "rank 0: building nccl: ValueError: no" in err


def test_print_table_moves_long_cells_to_notes(capsys):
    cuda = "error: " + common.error_line(RuntimeError("CUDA error: " + "y" * 200))
    common.print_table(["B", "system", "graph ms"], [[1, "(a)", "1.25"], [8, "(b)", cuda], [64, "(b)", cuda]])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == " B  system  graph ms" and lines[1] == "-" * len(lines[0])
    assert lines[2:5] == [" 1     (a)      1.25", " 8     (b)       [1]", "64     (b)       [1]"]
    assert lines[5:] == [f"[1] {cuda}"]  # one note for the two rows of the same error
    short = "x" * common.TABLE_CELL_CHARS  # at the limit: stays in its cell
    common.print_table(["a"], [[short]])
    assert capsys.readouterr().out.splitlines()[2] == short


def test_parse_shapes():
    s = common.parse_shapes(common.CHALLENGE_SHAPES)
    assert [(x.experts, x.topk, x.hidden, x.max_tokens) for x in s] == [
        (8, 2, 6144, 16),
        (64, 6, 2048, 32),
        (128, 4, 2880, 128),
        (128, 8, 4096, 256),
        (256, 8, 7168, 256),
    ]
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
    assert bench_all2all.parse_args(["--trace", "t", "--trace-fp8", "e4m3fnuz"]).trace_fp8 == "e4m3fnuz"
    assert bench_all2all.parse_args([]).trace_fp8 is None
    with pytest.raises(SystemExit):
        bench_all2all.parse_args(["--trace-fp8", "e5m2"])
    b = bench_sweep.parse_args(["--tokens", "1,8"])
    assert [s.max_tokens for s in b.shape_list] == [1, 8] and b.shape_list[0].experts == 256


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


class _Pool:
    """InputPool stand-in: every rank's routing of each entry, no process group."""

    def __init__(self, entries):
        self.entries = entries  # entries[j][r] = rank r's topk_idx
        self.items = [(torch.zeros(len(e[0]), 4), e[0], None) for e in entries]

    def __len__(self):
        return len(self.entries)

    def routing(self, j):
        return self.entries[j % len(self.entries)]


class _Ctx:
    world, rank, device, group = 2, 0, torch.device("cpu"), None


def _routing(monkeypatch, entries, micro):
    import bench_all2all as ba

    monkeypatch.setattr(ba.dist, "all_reduce", lambda t, group=None: t.mul_(2))  # 2 ranks, same T
    return ba.Routing(_Ctx(), common.Shape(4, 2, 1000, 4, torch.float16), _Pool(entries), micro)


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
    r = ba.Routing(_Ctx(), shape, _Pool([entry] * 8), micro, dispatch_dtype=torch.float8_e4m3fn)
    assert r.moved("dispatch", 0) == 2064 and r.moved("combine", 0) == 4000 and r.moved("pipeline", 0) == 6064
    assert r.sol("dispatch", 0) == pytest.approx(1.0 + 1.032) and r.sol("combine", 0) == pytest.approx(4.4)
    assert r.rows_bytes("dispatch+combine", 3) == 3 * (1032 + 2000) and r.phase_bytes() == 3032
    g = ba.graph_fields([12.864] * 20, r, 64, "dispatch+combine")  # twice the SoL, 2.032 + 4.4 us
    assert g["graph_x_sol"] == pytest.approx(2.0) and g["graph_GBps"] == pytest.approx(6064 / 12.864e3)


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


def test_scale_experts_torch_fallback():
    x = torch.randn(3, 5, 8).to(torch.bfloat16)
    n = torch.tensor([0, 5, 2], dtype=torch.int32)
    y = scale_experts(x, n, 3, out=x.clone())
    for e in range(3):
        torch.testing.assert_close(y[e, : n[e]], x[e, : n[e]] * 3, rtol=0, atol=0)
        torch.testing.assert_close(y[e, n[e] :], x[e, n[e] :], rtol=0, atol=0)


def test_scale_segments_torch_fallback_packed():
    """The torch fallback on a packed buffer: segments back to back, an empty one, a gap of
    padding rows between two, rows after the last; in place and into another tensor."""
    x = torch.randn(12, 8).to(torch.bfloat16)
    start = torch.tensor([0, 3, 3, 7], dtype=torch.int32)
    count = torch.tensor([3, 0, 2, 4], dtype=torch.int32)
    valid = [0, 1, 2, 3, 4, 7, 8, 9, 10]
    y = scale_segments(x, torch.empty_like(x), start, count, 5)
    assert torch.equal(y[valid], x[valid] * 5)
    assert torch.equal(y[[5, 6, 11]], x[[5, 6, 11]])  # padding keeps its value
    z = x.clone()
    scale_segments(z, z, start, count, 5)
    assert torch.equal(z, y)
    # packed helper: offsets with E + 1 entries
    offsets = torch.tensor([0, 3, 3, 5], dtype=torch.int32)
    n = torch.tensor([3, 0, 2], dtype=torch.int32)
    p = scale_packed(x, offsets, n, 2, out=torch.empty_like(x))
    assert torch.equal(p[:5], x[:5] * 2) and torch.equal(p[5:], x[5:])
    assert scale_segments(x, y, start[:0], count[:0], 3) is y  # no segments: nothing to do


def test_scale_segments_triton_interpreter():
    """The persistent Triton kernel under TRITON_INTERPRET=1 (CPU), in a child so the flag is
    set before triton loads: fewer programs than work items, empty segments, padding between
    segments, a segment longer than one row block, the padded and the packed helpers."""
    pytest.importorskip("triton")
    code = r"""
import sys, torch
sys.path.insert(0, %r)
import fake_gemm
fake_gemm.backend = lambda device: "triton"
x = torch.randn(23, 1500).to(torch.bfloat16)
y = torch.full_like(x, 7.0)
start = torch.tensor([0, 2, 2, 6, 13], dtype=torch.int64)
count = torch.tensor([2, 0, 3, 6, 9], dtype=torch.int32)
fake_gemm.scale_segments(x, y, start, count, 4)
rows = [0, 1, 2, 3, 4] + list(range(6, 12)) + list(range(13, 22))
assert torch.equal(y[rows], x[rows] * 4), "scaled rows"
for r in (5, 12, 22):
    assert torch.equal(y[r], torch.full_like(y[r], 7.0)), "row outside every segment untouched"
assert fake_gemm._programs(x.device, 23) == 6  # 23 rows / 4: min(4 per SM x 2 SMs, 6 blocks)
e = torch.randn(3, 10, 64).to(torch.float16)
n = torch.tensor([10, 0, 5], dtype=torch.int32)
out = fake_gemm.scale_experts(e, n, 3, out=torch.zeros_like(e))
assert torch.equal(out[0], e[0] * 3) and torch.equal(out[2, :5], e[2, :5] * 3)
assert not out[1].any() and not out[2, 5:].any()
p = torch.randn(16, 64).to(torch.bfloat16)
off = torch.tensor([0, 5, 5, 11], dtype=torch.int32)
cnt = torch.tensor([5, 0, 6], dtype=torch.int32)
q = fake_gemm.scale_packed(p, off, cnt, 2, out=torch.zeros_like(p))
assert torch.equal(q[:11], p[:11] * 2) and not q[11:].any()
print("ok")
""" % os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_benchmarks_import_common_first():
    """Multicast stays off through ONE place (moe_a2a.NO_MULTICAST_ENV): every script (a
    __main__ block) and every module that uses torch.distributed imports common (which imports
    moe_a2a first) before torch or anything that loads it, and no file sets the variables
    itself."""
    import ast

    bench = os.path.dirname(os.path.abspath(__file__))
    loaders = {"torch", "baselines", "bench_all2all", "fake_gemm", "microbench", "moe_a2a", "triton"}
    checked = []
    for name in sorted(os.listdir(bench)):
        if not name.endswith(".py") or name == "test_bench_pure.py":
            continue
        src = open(os.path.join(bench, name)).read()
        assert "NCCL_NVLS_ENABLE" not in src, f"{name} sets the multicast environment itself"
        if name == "common.py":
            continue  # test_common_sets_the_environment_before_torch
        if "__main__" not in src and "torch.distributed" not in src:
            continue  # a helper that never starts a process group (fake_gemm)
        first = None
        for node in ast.parse(src).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                roots = {m.split(".")[0] for m in mods if m}
                if "common" in roots:
                    first = "common"
                    break
                if roots & loaders:
                    first = sorted(roots & loaders)[0]
                    break
        assert first == "common", f"{name} imports {first} before common"
        checked.append(name)
    assert {
        "bench_all2all.py",
        "bench_sweep.py",
        "bench_graph.py",
        "microbench.py",
        "baselines.py",
        "bench_moe_layer.py",
        "bench_hf_model.py",
        "bench_host.py",
        "scaffold.py",
    } <= set(checked)


def test_tools_take_the_multicast_environment_from_one_file():
    """The tools' shell scripts start processes that may never import moe_a2a: they source
    tools/no_multicast_env.sh, whose values are moe_a2a.NO_MULTICAST_ENV's, and set none
    themselves."""
    import re

    import moe_a2a

    tools = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")
    env_file = open(os.path.join(tools, "no_multicast_env.sh")).read()
    exported = dict(re.findall(r"\b([A-Z_]+)=(\S+)", env_file.split("export", 1)[1]))
    assert exported == moe_a2a.NO_MULTICAST_ENV
    for name in sorted(os.listdir(tools)):
        if not name.endswith(".sh") or name == "no_multicast_env.sh":
            continue
        src = open(os.path.join(tools, name)).read()
        assert not any(f"{k}=" in src for k in exported), f"tools/{name} sets the multicast environment itself"
        # Lines of code only: a comment that mentions torchrun (tools/bounded.sh) starts nothing.
        code = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("#"))
        if "torchrun" in code or "python3" in code:
            assert "no_multicast_env.sh" in src, f"tools/{name} starts processes without tools/no_multicast_env.sh"


def test_common_sets_the_environment_before_torch():
    """In a fresh interpreter with none of the variables set, importing common alone puts every
    entry of moe_a2a.NO_MULTICAST_ENV, and ROCm's launch setting, into the environment before torch
    starts to load."""
    bench = os.path.dirname(os.path.abspath(__file__))
    code = r"""
import os, sys
seen = {}
class Spy:  # records the environment when torch is first looked up
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.update(os.environ)
        return None
sys.meta_path.insert(0, Spy())
sys.path[:0] = [%r, %r]
import common
import moe_a2a
assert common.NO_MULTICAST_ENV is moe_a2a.NO_MULTICAST_ENV
assert seen, "torch never loaded"
wanted = {**moe_a2a.NO_MULTICAST_ENV, **common.ROCM_LAUNCH_ENV}
missing = {k: seen.get(k) for k, v in wanted.items() if seen.get(k) != v}
assert not missing, f"not set when torch started to load: {missing}"
print("ok")
""" % (bench, os.path.join(os.path.dirname(bench), "python"))
    env = {k: v for k, v in os.environ.items() if k not in {**common.NO_MULTICAST_ENV, **common.ROCM_LAUNCH_ENV}}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_metadata_fields():
    m = common.metadata()
    for k in (
        "git_commit",
        "git_dirty",
        "torch",
        "cuda",
        "hip",
        "driver",
        "command",
        "argv",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "gpus_smi",
        "env",
    ):
        assert k in m, k
    assert m["argv"] == sys.argv and m["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert m["env"]["HIP_FORCE_DEV_KERNARG"] == os.environ["HIP_FORCE_DEV_KERNARG"]
    assert isinstance(m["git_dirty"], bool)


def test_smi_parsing(monkeypatch):
    out = "0, 00000000:18:00.0, NVIDIA H200, 570.1, 1980, 1980\n1, 00000000:2A:00.0, NVIDIA H200, 570.1, [N/A], 1980\n"
    monkeypatch.setattr(common, "_run", lambda cmd: out)
    g = common.nvidia_smi_gpus()
    assert [x["clocks.sm"] for x in g] == [1980, None] and g[1]["pci.bus_id"] == "00000000:2A:00.0"
    assert g[0]["name"] == "NVIDIA H200" and g[0]["clocks.max.sm"] == 1980


def test_report_and_outputs():
    import bench_all2all as ba
    import bench_sweep as bs

    rows = []
    for s in ("E8-K2-H64-T4", "E16-K2-H64-T4"):
        for sysname, t in (("nccl", 500.0), ("moe_a2a", 50.0)):
            for ph in ba.PHASES:
                r = {
                    "shape": s,
                    "system": sysname,
                    "phase": ph,
                    "tokens_per_rank": 3.0,
                    "tokens": 4,
                    "status": "ok",
                    "check": "pass",
                    "us_median": t,
                    "us_p10": t * 0.9,
                    "us_p90": t * 1.1,
                    "GBps": 10.0,
                    "x_sol": t / 10,
                    "sol_us": 10.0,
                    "sol_bound": "link",
                    "bytes": 1e5,
                }
                if ph in ba.GRAPH_PHASES and sysname == "moe_a2a":
                    r.update(
                        graph_us_median=t / 2,
                        graph_us_p10=t / 2.2,
                        graph_us_p90=t / 1.8,
                        graph_x_sol=t / 20,
                        graph_sol_us=10.0,
                    )
                elif ph in ba.GRAPH_PHASES:
                    r["graph_status"] = bl.NcclSystem.graph_note
                rows.append(r)
        rows += [
            {
                "shape": s,
                "system": "symm_mem",
                "phase": ph,
                "tokens_per_rank": 3.0,
                "tokens": 4,
                "status": "unsupported: 32 experts/rank > 16",
            }
            for ph in ba.PHASES
        ]
    ba.add_vs_nccl(rows)
    ba.add_floor(rows, {"bytes": 50000, "us": 5.0, "blocks": 32})
    moe = {(r["shape"], r["phase"]): r for r in rows if r["system"] == "moe_a2a"}
    assert moe[("E8-K2-H64-T4", "pipeline")]["vs_nccl"] == pytest.approx(10.0)
    assert moe[("E8-K2-H64-T4", "dispatch+combine")]["graph_x_floor"] == pytest.approx(5.0)
    assert "floor_exchange_us" not in moe[("E8-K2-H64-T4", "dispatch")]
    table = ba.table_rows(rows, harness=True)
    nccl_dc = next(line for line, r in zip(table, rows) if r["system"] == "nccl" and r["phase"] == "dispatch+combine")
    assert "eager only" in nccl_dc and "d+c" in nccl_dc
    assert len({len(line) for line in table}) == 1  # every line as wide as the headers
    assert ba.floor_summary_rows(rows)[0][:5] == ["E8-K2-H64-T4", "0.05", "5.0 (32)", "25.0", "5.00"]
    micro = {"B_GBps": 370.0, "B_source": "test", "L_us": 2.0, "B_hbm_GBps": 4000.0, "B_hbm_source": "test"}
    ba.print_report(rows, micro, harness=True)
    bs.print_report(rows, micro)
    ba.add_floor(rows, {"bytes": 1, "error": "no extension"})  # reported, not raised
    with tempfile.TemporaryDirectory() as d:
        ba.plot(rows, os.path.join(d, "a.png"))
        bs.plot(rows, micro, os.path.join(d, "s.png"))
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
    assert bm.layer_floor(_Ctx(), rows) == {
        "floor_exchange_us": 9.0,
        "floor_exchange_blocks": 32,
        "floor_exchange_bytes": 4000,
    }
    assert seen == [4000]

    def fail(ctx, nbytes):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(bm.microbench, "floor_for_bytes", fail)
    assert bm.layer_floor(_Ctx(), rows) == {"floor_exchange_status": "RuntimeError: out of memory"}
    assert "not measured" in bm.layer_floor(_Ctx(), [{"tokens": 8, "phase": "dispatch"}])["floor_exchange_status"]


def test_hf_model_bench_cli_and_sizing():
    import bench_hf_model as bh

    a = bh.parse_args([])
    assert a.batch_list == [1, 8, 64] and a.system_list == list(bh.SYSTEMS) and a.check
    assert a.model_table == bh.MODEL and (a.prompt_len, a.decode_steps, a.preroll_us) == (64, 50, 20000.0)
    s = bh.parse_args(["--smoke", "--decode-steps", "7"])
    assert s.model_table == bh.SMOKE_MODEL and (s.prompt_len, s.prefill_iters, s.decode_steps) == (16, 2, 7)
    m = bh.parse_args(
        ["--model", "hidden_size=1024, n_routed_experts=32", "--systems", "one_gpu,moe_a2a", "--batches", "2,4"]
    )
    t = m.model_table
    assert (t["hidden_size"], t["n_routed_experts"], t["num_experts_per_tok"]) == (1024, 32, 8)
    assert m.system_list == ["one_gpu", "moe_a2a"] and m.batch_list == [2, 4]
    u = bh.parse_args(["--batches", "1:8, 8,64:1:2"])
    assert u.batch_list == ["1:8", 8, "64:1:2"] and u.most_per_rank == 64
    assert bh.rank_counts("1:8", 3) == [1, 8, 1] and bh.rank_counts(8, 2) == [8, 8]
    assert bh.rank_counts("64:1:2", 2) == [64, 1]
    assert sorted(u.batch_list, key=bh.batch_key) == ["1:8", 8, "64:1:2"]
    # the prompt, then both decode series (with their warm-up) fit the position table
    assert m.max_positions >= m.prompt_len + 2 * m.warmup + m.decode_steps + m.wall_iters
    for bad in (
        ["--batches", "0"],
        ["--batches", "0:8"],  # a rank with no sequences: not offered
        ["--batches", "1:x"],
        ["--batches", ","],
        ["--batches", "65"],  # 65 x 64 prompt tokens > moe_a2a's 4096 per rank and forward
        ["--batches", "1:65"],
        ["--prompt-len", "65"],
        ["--systems", "vllm"],
        ["--model", "width=3"],
        ["--model", "num_experts_per_tok=x"],
        ["--model", "hidden_size=100"],
        ["--model", "topk_group=9"],
        ["--model", "num_experts_per_tok=40,topk_group=4"],  # more than the experts of 4 groups of 8
        ["--model", "first_k_dense_replace=4"],
        ["--decode-steps", "0"],
    ):
        with pytest.raises(SystemExit):
            bh.parse_args(bad)
    # every rank the same number of experts, n_group equal groups of >= 2
    assert [bh.experts_for_world(64, w, 8) for w in range(2, 9)] == [64, 72, 64, 80, 72, 112, 64]
    assert (bh.experts_for_world(8, 2, 8), bh.experts_for_world(16, 2, 4)) == (16, 16)
    kw = bh.config_kwargs(bh.MODEL, 3, 200)
    assert (kw["n_routed_experts"], kw["num_experts_per_tok"], kw["max_position_embeddings"]) == (72, 8, 200)


def test_hf_model_bench_model_is_moe_dominated():
    """The module docstring's arithmetic, on a meta-device build of the real transformers model:
    the routed experts are 86% of the default model's weights."""
    transformers = pytest.importorskip("transformers")
    import bench_hf_model as bh

    for table, share in ((bh.MODEL, 0.85), (bh.SMOKE_MODEL, 0.5)):
        cfg = transformers.DeepseekV3Config(**bh.config_kwargs(table, 2, 256))
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        experts, total = bh.weight_split(model)
        moe_layers = table["num_hidden_layers"] - table["first_k_dense_replace"]
        per_layer = table["n_routed_experts"] * 3 * table["hidden_size"] * table["moe_intermediate_size"] * 2
        assert experts == moe_layers * per_layer
        assert experts / total > share, (experts, total)


def test_hf_model_bench_inputs_and_report():
    import types

    import bench_hf_model as bh
    import scaffold

    args = bh.parse_args(["--smoke", "--batches", "1,4"])
    world, views = 3, []
    for rank in range(world):
        ctx = types.SimpleNamespace(rank=rank, world=world, device=torch.device("cpu"))
        views.append(bh.Inputs(ctx, args, vocab=50))
    everyone = views[0].prompts_for(4, own=False)
    assert everyone.shape == (world * 4, args.prompt_len)
    for rank, v in enumerate(views):  # the same draw on every rank; rank r owns rows r*B .. r*B+B-1
        assert torch.equal(v.prompts_for(4, own=False), everyone)
        assert torch.equal(v.prompts_for(4, own=True), everyone[rank * 4 : rank * 4 + 4])
        assert torch.equal(v.step_for(2, 4, own=True), v.step_for(2, 4, own=False)[rank * 4 : rank * 4 + 4])
    assert views[0].steps.shape[0] == 2 * args.warmup + args.decode_steps + args.wall_iters
    # unequal: "1:4" at world 3 is 1, 4, 1 sequences; the whole batch is rank 0's, rank 1's, rank 2's
    args = bh.parse_args(["--smoke", "--batches", "1:4"])
    views = [
        bh.Inputs(types.SimpleNamespace(rank=r, world=world, device=torch.device("cpu")), args, 50) for r in range(3)
    ]
    everyone = views[0].prompts_for("1:4", own=False)
    assert everyone.shape == (6, args.prompt_len)
    for rank, (first, n) in enumerate(((0, 1), (1, 4), (5, 1))):
        assert torch.equal(views[rank].prompts_for("1:4", own=True), everyone[first : first + n])
        assert torch.equal(
            views[rank].step_for(1, "1:4", own=True), views[0].step_for(1, "1:4", own=False)[first : first + n]
        )
        assert torch.equal(views[rank].prompts_for("1:4", own=True), views[rank].prompts_for(4, own=True)[:n])

    def row(system, batch, prefill_us, decode_us):
        r = {"system": system, "batch_per_rank": batch, "status": "ok", "check": "pass (1.0e-03)", "peak_gib": 1.0}
        for key, us in (("prefill_us", prefill_us), ("prefill_wall_us", prefill_us * 2)):
            r.update(bh.stat_fields(key, [us * 0.9, us, us * 1.1]))
        for key, us in (("decode_us", decode_us), ("decode_wall_us", decode_us * 2)):
            r.update(bh.stat_fields(key, [us] * 5))
        seqs = sum(bh.rank_counts(batch, 2))
        r["prefill_tok_s"] = bh.per_second(seqs * 64, r["prefill_us_median"])
        r["decode_seq_s"] = bh.per_second(seqs, r["decode_us_median"])
        return r

    rows = [
        row("one_gpu", 1, 4000.0, 2000.0),
        row("moe_a2a", 1, 1000.0, 1000.0),
        row("hf_ep", 1, 2000.0, 1500.0),
        row("moe_a2a", 8, 2000.0, 1000.0),
        {"system": "hf_ep", "batch_per_rank": 8, "status": "error: RuntimeError: out of memory"},
        row("moe_a2a", "1:8", 1000.0, 1000.0),
    ]
    assert rows[1]["prefill_tok_s"] == pytest.approx(128 / 1e-3) and bh.per_second(5, 0.0) != bh.per_second(5, 0.0)
    sp = bh.speedups(rows)
    assert sp[0] == {
        "batch_per_rank": 1,
        "prefill_vs_hf_ep": pytest.approx(2.0),
        "decode_vs_hf_ep": pytest.approx(1.5),
        "prefill_vs_one_gpu": pytest.approx(4.0),
        "decode_vs_one_gpu": pytest.approx(2.0),
    }
    assert sp[1] == {"batch_per_rank": "1:8"} and sp[2] == {"batch_per_rank": 8}  # nothing to compare with
    table = bh.table_rows(rows)
    assert [line[:2] for line in table] == [
        [1, bh.LABELS["moe_a2a"]],
        [1, bh.LABELS["hf_ep"]],
        [1, bh.LABELS["one_gpu"]],
        ["1:8", bh.LABELS["moe_a2a"]],
        [8, bh.LABELS["moe_a2a"]],
        [8, bh.LABELS["hf_ep"]],
    ]
    assert table[0][2:5] == ["1.00", "0.92-1.08", "128000"] and table[5][2].startswith("error")
    assert {len(line) for line in table} == {len(bh.HEADERS)}
    common.print_table(bh.HEADERS, table)
    common.print_table(bh.SPEEDUP_HEADERS, bh.speedup_rows(sp))
    with tempfile.TemporaryDirectory() as d:
        doc = {"meta": common.metadata(), "rows": rows, "speedups": sp}
        stem = scaffold.write_results(d, "bench_hf_model", doc, say=False)
        assert open(stem + ".csv").readline().startswith("system,batch_per_rank,status")
        assert os.path.getsize(stem + ".json") > 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_perf_report_sets_every_target_next_to_its_value(tmp_path):
    """benchmarks/perf_report.py on a stored run (2 x H200, 2026-11-23) and a synthetic fp8 file."""
    import json
    import shutil

    import perf_report
    from targets import TARGETS

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shutil.copy(os.path.join(root, "docs/results/2026-11-23-h200x2-transport/bench_graph.json"), tmp_path)
    text = perf_report.report(str(tmp_path))
    assert "Targets met: 0 of %d" % len(TARGETS) in text
    assert "| graph d+c DeepSeek-V3 T=1 | 27.3 (27.3-27.4) us | 12.0 us | no |" in text
    assert "| eager dispatch DeepSeek-V3 T=4096 | 330.3 (328.5-332.2) us | 230.0 us | no |" in text
    # that run has no drawn counts and no floor: those targets are not measured, not failed
    assert "| graph d+c E8-K2-H6144-T16, counts drawn | not measured (bench_graph.json) | 13.0 us | - |" in text
    assert "| graph d+c / in-run floor, DeepSeek-V3 T=4096 | not measured (bench_graph.json) | 1.30 x | - |" in text
    assert "not measured (fp8/bench_graph.json)" in text
    # fp8: the e4m3fn row is read, never the token-dtype row of the same shape, and vice versa.
    (tmp_path / "fp8").mkdir()
    shape = "E256-K8-H7168-T4096"
    rows = [
        {"shape": shape, "dispatch_dtype": "bfloat16", "eager_dispatch_us_median": 300.0},
        {
            "shape": shape,
            "dispatch_dtype": "e4m3fn",
            "eager_dispatch_us_median": 170.0,
            "eager_dispatch_vs_token_dtype": 0.54,
        },
    ]
    (tmp_path / "fp8" / "bench_graph.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    text = perf_report.report(str(tmp_path))
    assert "| fp8 dispatch / bf16 dispatch, DeepSeek-V3 T=4096 (eager) | 0.54 x | 0.55 x | yes |" in text
    assert "Targets met: 1 of" in text


def test_perf_report_sets_the_training_targets_next_to_their_ratios(tmp_path):
    """perf_report.py's issue 40 block on a stored bench_moe_layer.json (4 x H100, 2026-11-27): each round over its
    forward mirror at every T, dispatch's p90 over its p10; a phase that did not run is not measured."""
    import shutil

    import perf_report
    from targets import LAYER_TARGETS

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    layer = os.path.join(root, "docs/results/2026-11-27-h100x2-session16/call5/layer/bench_moe_layer.json")
    text = perf_report.report(str(tmp_path))  # no layer run: every training target not measured
    assert f"Training rounds (issue 40; bench_moe_layer.json), targets met: 0 of {len(LAYER_TARGETS)}" in text
    unmeasured = "| not measured (bench_moe_layer.json) | 1.10 x | - |"
    assert "| backward of combine / forward dispatch, T=128 " + unmeasured in text
    shutil.copy(layer, tmp_path)
    text = perf_report.report(str(tmp_path))
    assert "Training rounds (issue 40; bench_moe_layer.json, world 4), targets met: 4 of 7" in text
    assert "| backward of combine / forward dispatch, T=2048 | 1.40 x | 1.10 x | no |" in text  # 413.0 / 295.3
    assert "| backward of dispatch / forward combine, T=512 | 1.03 x | 1.10 x | yes |" in text  # 87.0 / 84.6
    assert "| forward dispatch p90 / p10 in the layer, T=128 | 1.03 x | 1.20 x | yes |" in text  # 43.8 / 42.4
    with open(layer) as f:
        run = json.load(f)
    run["rows"] = [r for r in run["rows"] if r["phase"] != "combine"]
    (tmp_path / "bench_moe_layer.json").write_text(json.dumps(run))
    text = perf_report.report(str(tmp_path))
    assert "| backward of dispatch / forward combine, T=512 " + unmeasured in text


def test_compare_graph_sets_runs_side_by_side(tmp_path):
    """benchmarks/compare_graph.py on the stored one-GPU proxy runs (1 x H100, 2026-11-23)."""
    import compare_graph

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    d = os.path.join(root, "docs/results/2026-11-23-h100-mps-proxy")
    base, a = os.path.join(d, "bench_graph-baseline-run1.json"), os.path.join(d, "bench_graph-variant-a.json")
    text = compare_graph.compare([base, a], ["base", "A"])
    assert text.splitlines()[0] == "| shape | base us (p10-p90) | A us (p10-p90) | A / base |"
    assert "| E256-K8-H7168-T1 | 32.4 (31.6-32.7) | 33.8 (33.3-34.7) | 1.045 |" in text
    assert len(text.splitlines()) == 2 + 7  # head, rule, one line per shape
    out = tmp_path / "c.md"
    assert compare_graph.main([base, a, "--names", "base,A", "--out", str(out)]) == 0
    assert out.read_text().strip() == text
    with pytest.raises(SystemExit):
        compare_graph.main([base, a, "--names", "only-one"])


def test_compare_graph_sets_host_runs_side_by_side(tmp_path):
    """compare_graph.py on bench_host.json runs: "x add" per call and its ratio to the base; the kinds never mix."""
    import compare_graph

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = os.path.join(root, "docs/results/2026-11-25-h100-output-pool/bench_host-x-add.json")
    with open(base) as f:
        other = json.load(f)
    for r in other["rows"]:
        r["per_add"] *= 0.5
    half = tmp_path / "bench_host.json"
    half.write_text(json.dumps(other))
    text = compare_graph.compare_host([base, str(half)], ["base", "B"])
    assert text.splitlines()[0] == "| shape | sequence | call | base x add (us) | B x add (us) | B / base |"
    assert "| E256-K8-H7168-T1 | forward | dispatch | 2.22 (16.6) | 1.11 (16.6) | 0.500 |" in text
    assert len(text.splitlines()) == 2 + len(other["rows"])
    assert compare_graph.main([base, str(half), "--names", "base,B"]) == 0
    graph = os.path.join(root, "docs/results/2026-11-23-h100-mps-proxy/bench_graph-baseline-run1.json")
    with pytest.raises(SystemExit):
        compare_graph.main([base, graph])


def test_compare_graph_sets_layer_runs_side_by_side(tmp_path):
    """compare_graph.py on bench_moe_layer.json runs (2 x H100, 2026-11-27): one line per (T, phase), a failed
    phase "-", the kinds never mix."""
    import compare_graph

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    d = os.path.join(root, "docs/results/2026-11-27-h100x2-session16/call2/layer")
    base, new = (os.path.join(d, run, "bench_moe_layer.json") for run in ("1-base", "2-new"))
    assert compare_graph.run_kind(base) == "layer"
    text = compare_graph.compare_layer([base, new], ["base", "new"])
    assert text.splitlines()[0] == "| T/rank | phase | base us (p10-p90) | new us (p10-p90) | new / base |"
    assert "| 2048 | combine-bwd | 253.4 (250.4-255.5) | 246.5 (244.1-249.2) | 0.973 |" in text
    assert len(text.splitlines()) == 2 + 3 * 4  # three token counts, four phases
    with open(new) as f:
        failed = json.load(f)
    for r in failed["rows"]:
        if r["phase"] == "hbm-y":
            r.pop("us_median")
            r["status"] = "error: RuntimeError: out of memory"
        r["counts"] = "max"
    path = tmp_path / "bench_moe_layer.json"
    path.write_text(json.dumps(failed))
    text = compare_graph.compare_layer([base, str(path)], ["base", "oom"])
    assert "| 128 | hbm-y | 16.2 (16.0-16.5) | - | - |" in text
    assert compare_graph.main([base, str(path), "--names", "base,oom"]) == 0
    graph = os.path.join(root, "docs/results/2026-11-23-h100-mps-proxy/bench_graph-baseline-run1.json")
    assert compare_graph.run_kind(graph) == "graph"
    with pytest.raises(SystemExit):
        compare_graph.main([base, graph])


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


class _GatherCtx:
    world, rank, device, group = 3, 1, torch.device("cpu"), None


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
    ctx = _GatherCtx()
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
    ctx = _Ctx()
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


def test_unequal_counts_rows_in_the_reports(tmp_path):
    """perf_report and compare_graph: a target reads the row of its own counts spec, never another
    (rows without "counts" are "max"); the unequal table sets each unequal spec against the equal
    pair at its larger count, drawn against max."""
    import compare_graph
    import perf_report

    shape = "E8-K2-H6144-T16"

    def row(counts, us, ranks=None, dtype="bfloat16"):
        r = {"shape": shape, "counts": counts, "tokens": 16, "dispatch_dtype": dtype, "graph_us_median": us}
        r.update(graph_us_p10=us - 1, graph_us_p90=us + 1)
        if ranks is not None:
            r["rank_tokens"] = ranks
        return r

    rows = [
        row("1/16", 35.0, [1, 16]),
        row("0/16", 12.0, [0, 16]),
        row("16/16", 10.0, [16, 16]),
        row("max", 9.0, [16, 16]),
        row("drawn", 18.0, [9.5, 7.25]),
        row("1/1", 8.0, [1, 1]),
        row("4/16", 20.0, [4, 16], dtype="e4m3fn"),
        row("max", 5.0, [16, 16], dtype="e4m3fn"),
    ]
    (tmp_path / "bench_graph.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    text = perf_report.report(str(tmp_path))
    # the drawn row (issue 35's E8 target), not max's 9.0 or an unequal pair's
    assert "| graph d+c E8-K2-H6144-T16, counts drawn | 18.0 (17.0-19.0) us | 13.0 us | no |" in text
    lines = perf_report.unequal_lines(rows)
    assert lines[0] == "| shape | counts | graph d+c us (p10-p90) | equal pair | equal us | ratio |"
    assert lines[2:] == [
        "| E8-K2-H6144-T16 | 1/16 | 35.0 (34.0-36.0) | 16/16 | 10.0 | 3.50 |",
        "| E8-K2-H6144-T16 | 0/16 | 12.0 (11.0-13.0) | 16/16 | 10.0 | 1.20 |",
        "| E8-K2-H6144-T16 | drawn (9.5/7.2) | 18.0 (17.0-19.0) | max | 9.0 | 2.00 |",
        "| E8-K2-H6144-T16 e4m3fn | 4/16 | 20.0 (19.0-21.0) | max | 5.0 | 4.00 |",  # no 16/16 in fp8: max
    ]
    assert "\n".join(lines) in text and "| E8-K2-H6144-T16 1/16 | 35.0" in text
    assert perf_report.unequal_lines([row("max", 9.0)]) == []
    # a file from before --counts: no "counts" key, read as "max" (DeepSeek-V3 T=1's target is a max
    # row); an unequal row alone is not a target
    one = "E256-K8-H7168-T1"
    old = [{k: v for k, v in row("max", 22.8).items() if k not in ("counts", "rank_tokens")}]
    unequal = [row("0/1", 35.0, [0, 1]) | {"shape": one}]
    rows = unequal + [old[0] | {"shape": one}]
    (tmp_path / "bench_graph.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    assert "| graph d+c DeepSeek-V3 T=1 | 22.8 (21.8-23.8) us | 12.0 us | no |" in perf_report.report(str(tmp_path))
    (tmp_path / "bench_graph.json").write_text(json.dumps({"meta": {}, "rows": unequal}))
    assert "| graph d+c DeepSeek-V3 T=1 | not measured" in perf_report.report(str(tmp_path))
    # compare_graph keys a row by its counts too: the max row of an old run matches the new max row
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"rows": old}))
    b.write_text(json.dumps({"rows": [row("1/16", 35.0, [1, 16]), row("max", 11.4, [16, 16])]}))
    table = compare_graph.compare([str(a), str(b)], ["old", "new"])
    assert "| E8-K2-H6144-T16 | 22.8 (21.8-23.8) | 11.4 (10.4-12.4) | 0.500 |" in table
    table = compare_graph.compare([str(b), str(a)], ["new", "old"])
    assert "| E8-K2-H6144-T16 1/16 | 35.0 (34.0-36.0) | - |" in table


def test_bench_multinode_cli():
    """bench_multinode.py: DeepSeek-V3 at 1..4096 tokens then the challenge shapes; --counts as
    bench_graph's; --inputs >= 8 and --node-capacity >= 1."""
    import bench_multinode as bm

    a = bm.parse_args([])
    assert [s.label for s in a.shape_list[:4]] == [f"E256-K8-H7168-T{t}" for t in (1, 128, 1024, 4096)]
    assert [s.label for s in a.shape_list[4:]] == [s.label for s in common.parse_shapes(common.CHALLENGE_SHAPES)]
    assert a.count_list == [["max"]] * 9 and a.fp8 is None and a.node_capacity is None
    a = bm.parse_args(
        ["--shapes", "8,2,64,16", "--counts", "max;drawn;0/16", "--fp8", "e4m3fn", "--node-capacity", "4"]
    )
    assert a.count_list == [["max", "drawn", "0/16"]] and a.fp8 == "e4m3fn" and a.node_capacity == 4
    for bad in (["--inputs", "4"], ["--node-capacity", "0"], ["--shapes", "8,2,64,16", "--counts", "1/17"]):
        with pytest.raises(SystemExit):
            bm.parse_args(bad)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_bench_multinode_byte_formula_is_what_pack_sends(fp8):
    """The dispatch leg's bytes per rank pair (the formula the report states) are cap records of
    the layout the leg packs MultiNodeAllToAll's step 1 into, whatever the routing, and the byte
    buffer it sends is N of them; the combine leg's are cap partial rows of the token dtype. Hidden
    2880: the last fp8 scale block short."""
    import bench_multinode as bm

    from moe_a2a import reference as ref
    from moe_a2a.multinode import dispatch_leg_record, pack_sends
    from moe_a2a.node_legs import pack_records

    shape, cap, nodes = common.Shape(16, 4, 2880, 8), 6, 4
    for tokens in (0, 3, 8):
        x, idx, w = ref.generate_rank_inputs(1, nodes, 16, 4, 2880, 8, torch.bfloat16, seed=1, num_tokens=tokens)
        scale = None
        if fp8:
            x, scale = ref.quantize_fp8(x, torch.float8_e4m3fn)
        _, sent = pack_sends(x, idx, w, scale, 16, nodes, cap, me=1)
        d_pair, c_pair = bm.leg_pair_bytes(shape, cap, fp8)
        record = dispatch_leg_record(sent, 16, nodes)
        assert cap * record.size == d_pair and record.size % 16 == 0
        fields = (sent[0], *sent[3:], sent[1], sent[2])  # the record's order: row, fp8 scales, ids, weights
        assert pack_records(fields, record).shape == (nodes, cap, record.size)
        assert all(t.shape[:2] == (nodes, cap) for t in sent)
    assert c_pair == cap * 2880 * 2
    # bf16: 5760 row bytes + 4 x (4 + 4); fp8: 2880 + 23 x 4 scales + 32 = 3004, padded to 3008
    assert bm.dispatch_row_bytes(shape, fp8) == (3008 if fp8 else 5792)
    assert bm.dispatch_row_bytes(common.Shape(256, 8, 7168, 1), fp8) == (7168 + 56 * 4 + 64 if fp8 else 14336 + 64)
    # hidden 7: bf16 14 row bytes -> 16, fp8 7 -> 8 + 4 scale bytes; + 16 of ids and weights, padded to 32
    assert bm.dispatch_row_bytes(common.Shape(8, 2, 7, 1), fp8) == 32


def test_bench_multinode_load_splits():
    """Rank me sends counts[me][n] rows to node n and receives counts[n][me] from it."""
    import bench_multinode as bm

    counts = [[0, 3, 1], [2, 0, 0], [5, 4, 0]]
    assert bm.load_splits(counts, 1, 10) == ([20, 0, 0], [30, 0, 40])
    assert bm.load_splits(counts, 0, 1) == ([0, 3, 1], [0, 2, 5])


def test_scaffold_arguments():
    """The shared options keep their flags and defaults, and the list and size parsers turn bad
    text into an argparse error naming the flag."""
    import scaffold

    p = scaffold.parser("doc")
    scaffold.add_out(p)
    scaffold.add_layout(p, "packed")
    scaffold.add_iters(p, 50)
    scaffold.add_warmup(p, 5)
    scaffold.add_seed(p)
    scaffold.add_switch(p, "--check", "verify")
    scaffold.add_no_microbench(p)
    a = p.parse_args([])
    assert a.out == os.path.join(common.BENCH_DIR, "results") and a.layout == "packed"
    assert (a.iters, a.warmup, a.seed, a.check, a.no_microbench) == (50, 5, 0, True, False)
    a = p.parse_args(["--no-check", "--layout", "padded", "--no-microbench"])
    assert not a.check and a.layout == "padded" and a.no_microbench
    with pytest.raises(SystemExit):
        p.parse_args(["--layout", "ragged"])
    assert scaffold.ints(p, "--tokens", "1, 8,") == [1, 8]
    assert scaffold.sizes(p, "--shape", "256,8,7168", ("experts", "topk", "hidden")) == [256, 8, 7168]
    assert scaffold.names(p, "--systems", "nccl, moe_a2a", ("nccl", "moe_a2a")) == ["nccl", "moe_a2a"]
    for bad in (
        lambda: scaffold.ints(p, "--tokens", "1,x"),
        lambda: scaffold.ints(p, "--tokens", "0"),
        lambda: scaffold.ints(p, "--tokens", ""),
        lambda: scaffold.sizes(p, "--shape", "256,8", ("experts", "topk", "hidden")),
        lambda: scaffold.sizes(p, "--shape", "256,0,7168", ("experts", "topk", "hidden")),
        lambda: scaffold.names(p, "--systems", "deepep", ("nccl",)),
        lambda: scaffold.names(p, "--systems", ",", ("nccl",)),
        lambda: scaffold.at_least(p, a, iters=51),
        lambda: scaffold.at_least(p, a, warmup=6),
    ):
        with pytest.raises(SystemExit):
            bad()
    scaffold.at_least(p, a, iters=50, warmup=0)  # at the minimum: no error
    a.dtype_t, a.shape_list = torch.bfloat16, [common.Shape(8, 2, 64, 4)]
    s = scaffold.settings(a, without=("shape_list",))
    assert s["dtype_t"] == "torch.bfloat16" and "shape_list" not in s and s["iters"] == 50
    json.dumps(s)  # every value as JSON


def test_scaffold_cases_and_files(tmp_path, capsys):
    """run_cases: the rows in case order, rank 0 alone prints the headers and runs after();
    write_results: OUT/stem.json with the document and OUT/stem.csv with its rows."""
    import types

    import scaffold

    seen = []
    for rank in (0, 1):
        ctx = types.SimpleNamespace(rank=rank)
        rows = scaffold.run_cases(
            ctx,
            [1, 2],
            lambda t: [{"tokens": t, "us": 10.0 * t}, {"tokens": t, "us": 1.0}],
            header=lambda t: f"== T={t}",
            after=lambda rows, new: seen.append((rank, len(rows), new[0]["tokens"])),
        )
        assert [r["tokens"] for r in rows] == [1, 1, 2, 2]
    assert seen == [(0, 2, 1), (0, 4, 2)]
    assert capsys.readouterr().out == "== T=1\n== T=2\n"
    assert scaffold.run_cases(types.SimpleNamespace(rank=0), [], lambda c: [c]) == []
    doc = {"meta": {"m": 1}, "config": {"iters": 50}, "rows": rows}
    path = scaffold.write_results(str(tmp_path / "out"), "bench_x", doc)
    assert path == str(tmp_path / "out" / "bench_x")
    assert json.load(open(path + ".json")) == doc and open(path + ".csv").readline().strip() == "tokens,us"
    assert capsys.readouterr().out == f"wrote {path}.json/.csv\n"
    scaffold.write_results(str(tmp_path), "quiet", doc, say=False)
    assert capsys.readouterr().out == "" and os.path.exists(tmp_path / "quiet.csv")
    plt = common.pyplot()
    if plt is not None:
        fig, ax = plt.subplots()
        ax.plot([1, 2], [3, 4])
        scaffold.save_figure(plt, fig, str(tmp_path / "png" / "p.png"), rect=(0, 0, 1, 0.9))
        assert os.path.getsize(tmp_path / "png" / "p.png") > 0


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
