"""moe_a2a.swiglu off the GPU: the torch ops it falls back to (the kernel's own tests are
tests/python/gpu/test_swiglu.py). The weights of the rows of no expert are undefined (NaN, maybe)
and must not reach h; the experts' rows come in pairs."""

import pytest
import torch
import torch.nn.functional as F

from moe_a2a.swiglu import swiglu


def test_weighted_activation_and_its_gradients_are_the_formulas():
    gen = torch.Generator().manual_seed(1)
    gate, up = (torch.randn(6, 8, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w = torch.rand(6, generator=gen, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(swiglu(gate, up, w), F.silu(gate) * up * w.unsqueeze(-1))
    assert torch.autograd.gradcheck(lambda a, b, c: swiglu(a, b, c), (gate, up, w))
    torch.testing.assert_close(swiglu(gate, up), F.silu(gate) * up)


def test_rows_of_no_expert_take_no_weight():
    """Experts' rows [0, 2) and [4, 5) of 6: the NaN weights of rows 2, 3 and 5 count as 0."""
    gate, up = torch.randn(6, 8), torch.randn(6, 8)
    w = torch.tensor([0.5, 0.25, float("nan"), float("nan"), 2.0, float("nan")])
    offsets, counts = torch.tensor([0, 4, 6], dtype=torch.int32), torch.tensor([2, 1], dtype=torch.int32)
    h = swiglu(gate, up, w, offsets, counts)
    ours = torch.tensor([True, True, False, False, True, False])
    want = F.silu(gate) * up * torch.where(ours, w, 0.0).unsqueeze(-1)
    torch.testing.assert_close(h, want)
    assert bool(torch.isfinite(h).all())


def test_expert_rows_come_in_pairs():
    gate = torch.randn(2, 8)
    with pytest.raises(ValueError, match="go together"):
        swiglu(gate, gate, None, torch.tensor([0, 2], dtype=torch.int32))
