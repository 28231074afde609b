"""moe_a2a's grouped_gemv (the experts' small-rows linear layer) against an fp64 reference, on
each rank's own GPU (no collective):

    torchrun --nproc-per-node=<GPUs> -m pytest tests/python/gpu/test_grouped_gemv.py -q

Both weight layouts (contiguous along in or along out), every element type, every
rows_per_pass (0: automatic, 1, 2, 4), experts with no row, with more rows than a pass
takes, with padding between them (expert_alignment), widths that are not a multiple of a
block's columns or a wave's vectors, x with a row stride wider than its rows; offsets that
point past x (skipped, never written outside y); a CUDA graph replayed on other counts; the
fused SwiGLU (swiglu=True) against the unfused chain; the integrations' choice (`applies`); and
bad arguments (a clear error naming them).

Tolerance: the kernel sums in fp32 and rounds once; the reference sums in fp64. fp32 output:
1e-5 of the largest reference value; fp16 and bf16: half an ulp of the output type
(2^-11, 2^-8 relative) plus the fp32 sum's error, checked at 1e-3 and 8e-3 of it.
"""

import pytest
import torch

from moe_a2a import grouped_gemv as gg

TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def make_case(counts, in_, out, dtype, gap=0, x_pad=0, seed=0, w_layout="in"):
    """x [rows, in_] (a view of rows in_ + x_pad wide), w [E, out, in_] contiguous along w_layout
    ("in": nn.Linear's layout per expert; "out": the transpose of an [E, in_, out] tensor),
    offsets, counts."""
    gen = torch.Generator().manual_seed(seed)
    counts_t = torch.tensor(counts, dtype=torch.int32)
    offsets = torch.zeros(len(counts) + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(counts_t + gap, 0)
    rows = int(offsets[-1]) + 3  # rows past the last expert: of no expert
    x = torch.randn(rows, in_ + x_pad, generator=gen).to(dtype).cuda()[:, :in_]
    w = (torch.randn(len(counts), out, in_, generator=gen) * in_**-0.5).to(dtype).cuda()
    if w_layout == "out":
        w = w.transpose(1, 2).contiguous().transpose(1, 2)
    return x, w, offsets.cuda(), counts_t.cuda()


def reference(x, w, offsets, counts):
    """{row: fp64 output row} for every row of an expert."""
    out = {}
    for e in range(w.shape[0]):
        s, n = int(offsets[e]), int(counts[e])
        y = x[s : s + n].double() @ w[e].double().T
        for i in range(n):
            out[s + i] = y[i]
    return out


def check(y, expected, dtype):
    assert y.dtype == dtype
    scale = max(float(r.abs().max()) for r in expected.values())
    for row, want in expected.items():
        err = float((y[row].double() - want).abs().max())
        assert err <= TOL[dtype] * scale, f"row {row}: off by {err:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("w_layout,out", [("in", 37), ("out", 40)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("rows_per_pass", [0, 1, 2, 4])
def test_matches_the_reference(dtype, rows_per_pass, w_layout, out):
    counts = [0, 1, 2, 11, 0, 3, 8, 0, 5, 6]  # every mix of the automatic mode's bodies
    x, w, offsets, counts_t = make_case(counts, in_=200, out=out, dtype=dtype, x_pad=8, w_layout=w_layout)
    y = gg.grouped_gemv(x, w, offsets, counts_t, rows_per_pass)
    assert y.shape == (x.shape[0], out)
    check(y, reference(x, w, offsets, counts_t), dtype)


@pytest.mark.parametrize("w_layout", ["in", "out"])
@pytest.mark.parametrize("in_,out", [(2048, 2816), (1408, 2048), (8, 8), (7168 + 64, 296)])
def test_model_widths_and_padding_between_experts(in_, out, w_layout):
    x, w, offsets, counts = make_case([2, 0, 1, 5], in_=in_, out=out, dtype=torch.bfloat16, gap=3, seed=1,
                                      w_layout=w_layout)  # fmt: skip
    y = gg.grouped_gemv(x, w, offsets, counts)
    check(y, reference(x, w, offsets, counts), torch.bfloat16)


def test_experts_past_x_are_skipped():
    x, w, offsets, counts = make_case([2, 3, 1], in_=64, out=40, dtype=torch.float32)
    offsets[1] = x.shape[0] - 1  # expert 1 would run 2 rows past x: left out
    offsets[2] = -4  # expert 2 starts before x: left out
    y = gg.grouped_gemv(x, w, offsets, counts, 2)
    torch.cuda.synchronize()  # a write outside y would fault here
    want = reference(x[:, :], w[:1], offsets[:2], counts[:1])
    check(y, want, torch.float32)


def test_graph_replays_other_counts():
    x, w, offsets, counts = make_case([1, 2, 0, 4], in_=256, out=64, dtype=torch.bfloat16)
    gg.grouped_gemv(x, w, offsets, counts, 2)  # loads the op before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = gg.grouped_gemv(x, w, offsets, counts, 2)
    for new_counts in ([0, 0, 3, 1], [2, 2, 2, 1]):
        c = torch.tensor(new_counts, dtype=torch.int32)
        counts.copy_(c)
        offsets[1:].copy_(torch.cumsum(c, 0).to(torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        check(y, reference(x, w, offsets, counts), torch.bfloat16)


SWIGLU_ULP = {torch.float32: 2.0**-22, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("rows_per_pass", [0, 1, 2, 4])
@pytest.mark.parametrize("intermediate", [37, 1408])
def test_swiglu_is_the_unfused_chain(dtype, rows_per_pass, intermediate):
    """swiglu=True gives act_fn(gate) * up over the unfused output's halves, as transformers'
    default gate computes it, to an ulp of the output type (the kernel rounds the projection, the
    SiLU and the product as that chain does; only expf's last bit may differ); the rows of an
    expert only, of every mix of the automatic mode's bodies."""
    counts = [0, 1, 2, 11, 0, 3, 8, 0, 5, 6]
    x, w, offsets, counts_t = make_case(counts, in_=256, out=2 * intermediate, dtype=dtype, x_pad=8, gap=1)
    got = gg.grouped_gemv(x, w, offsets, counts_t, rows_per_pass, swiglu=True)
    assert got.shape == (x.shape[0], intermediate) and got.dtype == dtype
    gate, up = gg.grouped_gemv(x, w, offsets, counts_t, rows_per_pass).chunk(2, dim=-1)
    want = torch.nn.functional.silu(gate) * up
    for e, n in enumerate(counts):
        rows = slice(int(offsets[e]), int(offsets[e]) + n)
        torch.testing.assert_close(got[rows], want[rows], rtol=SWIGLU_ULP[dtype], atol=1e-6)


def test_swiglu_takes_gate_then_up_along_in_only():
    x, w, offsets, counts = make_case([1, 2, 1], in_=64, out=16, dtype=torch.bfloat16)
    assert gg.applies(x, w, 1.0, swiglu=True)
    along_out = w.transpose(1, 2).contiguous().transpose(1, 2)
    assert gg.applies(x, along_out, 1.0) and not gg.applies(x, along_out, 1.0, swiglu=True)
    assert not gg.applies(x, w[:, :15], 1.0, swiglu=True)  # an odd out: no halves
    for bad in (along_out, w[:, :15]):
        with pytest.raises(RuntimeError, match="swiglu takes w"):
            gg.grouped_gemv(x, bad, offsets, counts, swiglu=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_moe_layers_experts_at_decode(dtype, monkeypatch):
    """moe_a2a.layers.expert_swiglu with impl "auto" at a decode step's rows an expert and no
    gradient asked for runs on grouped_gemv (its weights [E, H, F] / [E, F, H]: contiguous along
    the output) and gives the per-expert loop's rows."""
    from moe_a2a import layers

    E, H, F = 8, 256, 96
    x, _, offsets, counts = make_case([1, 0, 2, 1, 0, 0, 3, 1], in_=H, out=8, dtype=dtype, seed=3)
    gen = torch.Generator().manual_seed(4)
    w_gate, w_up = ((torch.randn(E, H, F, generator=gen) * H**-0.5).to(dtype).cuda() for _ in range(2))
    w_down = (torch.randn(E, F, H, generator=gen) * F**-0.5).to(dtype).cuda()
    calls = []
    kernel = gg.grouped_gemv
    monkeypatch.setattr(gg, "grouped_gemv", lambda *a: calls.append(a[1].shape) or kernel(*a))
    with torch.no_grad():
        got = layers.expert_swiglu(x, offsets, counts, w_gate, w_up, w_down, "packed", rows_per_expert=1.0)
        want = layers.expert_swiglu(x, offsets, counts, w_gate, w_up, w_down, "packed", impl="loop")
    assert calls == [(E, F, H), (E, F, H), (E, H, F)]  # gate, up, down, each as [E, out, in]
    n = int(offsets[-1])
    scale = float(want[:n].abs().max())
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert float((got[:n].float() - want[:n].float()).abs().max()) <= tol * scale


def test_applies_where_the_integrations_use_it(monkeypatch):
    x = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(32, 96, 64, device="cuda", dtype=torch.bfloat16)
    assert gg.applies(x, w, 0.5) and gg.applies(x, w, gg.ROWS_PER_EXPERT_LIMIT)
    assert not gg.applies(x, w, gg.ROWS_PER_EXPERT_LIMIT + 0.5)
    assert gg.applies(x, w.transpose(1, 2).contiguous().transpose(1, 2), 0.5)  # contiguous along out
    assert not gg.applies(x, torch.randn(32, 96, 128, device="cuda", dtype=torch.bfloat16)[:, :, ::2], 0.5)  # neither
    assert not gg.applies(x.cpu(), w.cpu(), 0.5)
    assert not gg.applies(x.double(), w.double(), 0.5)
    wg = w.clone().requires_grad_()
    assert not gg.applies(x, wg, 0.5)
    with torch.no_grad():
        assert gg.applies(x, wg, 0.5)
    monkeypatch.setenv("MOE_A2A_GROUPED_GEMV", "0")
    assert not gg.applies(x, w, 0.5)


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda x, w, o, c: (x.to(torch.int8), w, o, c), "x must be bfloat16, float16 or float32"),
        (lambda x, w, o, c: (x, w.float(), o, c), "w is Float"),
        (lambda x, w, o, c: (x, w[:, :, :8], o, c), "w must be [experts, out, in]"),
        (
            lambda x, w, o, c: (x, torch.randn(3, 16, 128, device="cuda", dtype=w.dtype)[:, :, ::2], o, c),
            "contiguous along in",
        ),
        (lambda x, w, o, c: (x, w[:, :12].transpose(1, 2).contiguous().transpose(1, 2), o, c), "out a multiple of 8"),
        (lambda x, w, o, c: (x, w, o.long(), c), "offsets must be int32"),
        (lambda x, w, o, c: (x, w, o, c[:2]), "counts must be int32 [3]"),
        (lambda x, w, o, c: (x[:, :12], w[:, :, :12], o, c), "must be a multiple of 8"),
        (lambda x, w, o, c: (x, w, o.cpu(), c), "on one GPU"),
    ],
)
def test_bad_arguments_name_what_is_wrong(change, message):
    import moe_a2a._ext

    moe_a2a._ext.ext()
    args = change(*make_case([1, 2, 1], in_=64, out=16, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        torch.ops.moe_a2a.grouped_gemv(*args, 2)
    with pytest.raises(RuntimeError, match=r"rows_per_pass must be 0 \(automatic\), 1, 2 or 4"):
        torch.ops.moe_a2a.grouped_gemv(*make_case([1], in_=64, out=16, dtype=torch.bfloat16), 3)
