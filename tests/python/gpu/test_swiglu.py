"""moe_a2a.swiglu (the experts' SwiGLU, weighted or not, one kernel each way) against an fp64
reference, on each rank's own GPU (no collective):

    torchrun --nproc-per-node=<GPUs> -m pytest tests/python/gpu/test_swiglu.py -q

h = silu(gate) * up * w and its three gradients, every element type, with and without row
weights, with the experts' rows given (the rows of no expert hold NaN in gate, up and w, and come
out as zeros, forward and backward), the unweighted h within an ulp of torch's chain F.silu(gate) *
up (the same roundings), a
padded [E, cap, F] input, the torch fallback for a width the kernel does not take, gradcheck in
float64 through the fallback's formula (the kernel takes no float64), and bad arguments.

Tolerance: the kernel computes in fp32 and rounds as torch's chain does (forward) or once
(gradients); fp16 and bf16 outputs are within an ulp or two of the type plus fp32's error
(checked at 2e-3 and 1e-2 of the largest value).
"""

import pytest
import torch
import torch.nn.functional as F

from moe_a2a.swiglu import swiglu

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def reference(gate, up, w, rows):
    """h, and with it the closure of its gradients, in fp64 on the CPU; rows (bool) outside the
    experts' are zeros (their gate, up and w: 0, not the NaN they hold)."""
    keep = rows.cpu().unsqueeze(-1)
    g = torch.where(keep, gate.double().cpu(), 0.0).requires_grad_()
    u = torch.where(keep, up.double().cpu(), 0.0).requires_grad_()
    wd = None if w is None else torch.where(rows.cpu(), w.double().cpu(), 0.0).requires_grad_()
    h = F.silu(g) * u * (1.0 if wd is None else wd.unsqueeze(-1))
    return h, (g, u, wd)


def assert_close(got, want, dtype, what):
    scale = want.abs().max().item() + 1e-30
    err = (got.double().cpu() - want).abs().max().item()
    assert err <= TOL[dtype] * scale, f"{what}: max error {err:.3g}, {TOL[dtype]} of {scale:.3g} allowed"


@pytest.mark.parametrize("dtype", DTYPES, ids=[str(d)[6:] for d in DTYPES])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("expert_rows", [False, True], ids=["every-row", "experts-rows"])
def test_forward_and_backward_match_fp64(dtype, weighted, expert_rows):
    rows, cols = 50, 2048 if dtype != torch.float32 else 132
    gen = torch.Generator().manual_seed(5)
    # experts' rows [0, 7) [9, 9) [12, 30) [30, 31), then none: gaps, an empty expert, a tail
    offsets, counts = torch.tensor([0, 9, 12, 30, 40], dtype=torch.int32), torch.tensor([7, 0, 18, 1])
    ours = torch.zeros(rows, dtype=torch.bool)
    for o, n in zip(offsets[:-1].tolist(), counts.tolist()):
        ours[o : o + n] = True
    if not expert_rows:
        ours[:] = True
    gate = (3 * torch.randn(rows, cols, generator=gen)).to(dtype)
    up = torch.randn(rows, cols, generator=gen).to(dtype)
    w = torch.rand(rows, generator=gen)
    for t in (gate, up, w):  # undefined values in the rows of no expert: never read
        t[~ours] = float("nan")
    gate, up = gate.cuda().requires_grad_(), up.cuda().requires_grad_()
    w = w.cuda().requires_grad_() if weighted else None
    grad_h = torch.randn(rows, cols, generator=gen).to(dtype).cuda()
    given = (offsets.cuda(), counts.cuda()) if expert_rows else (None, None)
    h = swiglu(gate, up, w, *given)
    h.backward(grad_h)
    want_h, (g, u, wd) = reference(gate.detach(), up.detach(), None if w is None else w.detach(), ours)
    want_h.backward(grad_h.double().cpu())
    assert h.dtype == dtype and h.shape == (rows, cols)
    assert_close(h.detach(), want_h.detach(), dtype, "h")
    assert_close(gate.grad, g.grad, dtype, "grad gate")
    assert_close(up.grad, u.grad, dtype, "grad up")
    if weighted:
        assert_close(w.grad, wd.grad, torch.float32 if dtype == torch.float32 else dtype, "grad w")
    outside = ~ours.cuda()
    for what, t in (("h", h), ("grad gate", gate.grad), ("grad up", up.grad)) + (
        (("grad w", w.grad),) if weighted else ()
    ):
        assert not t[outside].any(), f"{what}: a row of no expert is not zero"  # zeros, not merely small
    if not weighted:  # torch's unfused chain's roundings (silu(gate), then the product): within an ulp
        mine = ours.cuda()
        ulp = torch.finfo(dtype).eps
        torch.testing.assert_close(h[mine], (F.silu(gate.detach()) * up.detach())[mine], rtol=ulp, atol=1e-30)


def test_padded_rows_and_fallback_width_agree_with_torch():
    """[E, cap, F] goes through the kernel as rows; F = 12 (not a multiple of 8 bf16 values)
    goes through torch ops: both give silu(gate) * up * w."""
    gen = torch.Generator().manual_seed(6)
    for shape in ((3, 5, 64), (7, 12)):
        gate = torch.randn(*shape, generator=gen).cuda()
        up = torch.randn(*shape, generator=gen).cuda()
        w = torch.rand(*shape[:-1], generator=gen).cuda()
        torch.testing.assert_close(swiglu(gate, up, w), F.silu(gate) * up * w.unsqueeze(-1), rtol=1e-5, atol=1e-6)


def test_gradcheck_of_the_formula():
    """float64 (the fallback) under gradcheck: the gradients the kernel is checked against above
    are the formula's."""
    gen = torch.Generator().manual_seed(7)
    gate, up = (torch.randn(4, 6, generator=gen, dtype=torch.float64).cuda().requires_grad_() for _ in range(2))
    w = torch.rand(4, generator=gen, dtype=torch.float64).cuda().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b, c: swiglu(a, b, c), (gate, up, w))


def test_bad_arguments_raise_naming_them():
    import moe_a2a._ext as ext_module

    ext_module.ext()
    gate = torch.randn(4, 16, device="cuda")
    with pytest.raises(RuntimeError, match="up must be"):
        torch.ops.moe_a2a.swiglu(gate, torch.randn(4, 8, device="cuda"))
    with pytest.raises(RuntimeError, match="row_weights must be float32"):
        torch.ops.moe_a2a.swiglu(gate, gate, torch.ones(3, device="cuda"))
    with pytest.raises(RuntimeError, match="expert_offsets and expert_num_tokens go together"):
        torch.ops.moe_a2a.swiglu(gate, gate, None, torch.zeros(2, dtype=torch.int32, device="cuda"))
    with pytest.raises(RuntimeError, match="expert_num_tokens must be int32"):
        counts = torch.ones(2, device="cuda")
        torch.ops.moe_a2a.swiglu(gate, gate, None, torch.zeros(3, dtype=torch.int32, device="cuda"), counts)
    with pytest.raises(RuntimeError, match="F \\(6\\) must be a positive multiple of 4"):
        torch.ops.moe_a2a.swiglu(torch.randn(4, 6, device="cuda"), torch.randn(4, 6, device="cuda"))
