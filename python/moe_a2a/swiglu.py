"""The experts' SwiGLU activation, h = silu(gate) * up, each row scaled by its router weight
where the experts apply the weights (AllToAll's weights_at_experts):

    h = swiglu(gate, up, row_weights=None, expert_offsets=None, expert_num_tokens=None)

On a GPU it is one kernel each way (moe_a2a's swiglu / swiglu_backward ops,
csrc/experts/swiglu.h): the products in fp32, h rounded as torch's chain F.silu(gate) * up rounds
it, and the backward gives gate's, up's and the weights' gradients in one pass, each rounded once
(the weights' a row sum, in a fixed order).
As torch ops the weighted activation took several passes over [rows, F], fp32 temporaries among
them, which cost the layer more than the backward of combine saves by not reading y
(docs/design/weights-at-experts.md). Given dispatch's expert_offsets and expert_num_tokens, the
rows of no expert are left out: their values and weights are undefined (NaN bit patterns,
maybe), and on the GPU their h and gradients are zeros. Elsewhere (CPU, a dtype or width the
kernel does not take) the same values come from torch ops, over every row, with the weights of
rows of no expert taken as 0.
"""

from typing import Optional

import torch
import torch.nn.functional as F

__all__ = ["expert_row_mask", "swiglu"]

_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _fused(gate: torch.Tensor, up: torch.Tensor) -> bool:
    """Whether the kernel takes gate and up: a GPU, one of its dtypes, alike, F a multiple of a
    16-byte vector's elements (the inputs are made contiguous if they are not)."""
    if gate.device.type != "cuda" or gate.dtype not in _DTYPES or up.dtype != gate.dtype or up.shape != gate.shape:
        return False
    return gate.dim() >= 1 and gate.shape[-1] > 0 and gate.shape[-1] % (16 // gate.element_size()) == 0


def expert_row_mask(expert_offsets: torch.Tensor, expert_num_tokens: torch.Tensor, num_rows: int) -> torch.Tensor:
    """bool [num_rows]: True for the flat rows of dispatch's expert_x (viewed as [-1, H]) that
    belong to an expert, i.e. offsets[e] <= row < offsets[e] + num_tokens[e] for some e.

    Works for both layouts (offsets ascending) and never synchronises with the host.
    """
    rows = torch.arange(int(num_rows), device=expert_offsets.device)
    starts = expert_offsets[:-1].long().contiguous()
    counts = expert_num_tokens.long()
    # The last expert starting at or before each row; an empty expert that shares its start
    # with the next one is skipped by right=True.
    e = torch.searchsorted(starts, rows, right=True) - 1
    ec = e.clamp(min=0)
    return (e >= 0) & (rows - starts[ec] < counts[ec])


def _torch_swiglu(gate, up, row_weights, expert_offsets, expert_num_tokens):
    h = F.silu(gate) * up
    if row_weights is None:
        return h
    if expert_offsets is not None:  # 0, not an undefined value that could be NaN
        rows = expert_row_mask(expert_offsets, expert_num_tokens, row_weights.numel()).view(row_weights.shape)
        row_weights = torch.where(rows, row_weights, 0.0)
    return (h * row_weights.unsqueeze(-1)).to(h.dtype)


class _SwiGLUFunction(torch.autograd.Function):
    """The fused op with its backward; 2-D [rows, F] contiguous inputs, row_weights [rows]."""

    @staticmethod
    def forward(ctx, gate, up, row_weights, offsets, counts):
        ctx.save_for_backward(gate, up, row_weights, offsets, counts)
        return torch.ops.moe_a2a.swiglu(gate, up, row_weights, offsets, counts)

    @staticmethod
    def backward(ctx, grad_h):
        gate, up, row_weights, offsets, counts = ctx.saved_tensors
        weight_grads = row_weights is not None and ctx.needs_input_grad[2]
        grad_gate, grad_up, grad_w = torch.ops.moe_a2a.swiglu_backward(
            grad_h.contiguous(), gate, up, row_weights, offsets, counts, weight_grads
        )
        return grad_gate, grad_up, grad_w if weight_grads else None, None, None


def swiglu(
    gate: torch.Tensor,
    up: torch.Tensor,
    row_weights: Optional[torch.Tensor] = None,
    expert_offsets: Optional[torch.Tensor] = None,
    expert_num_tokens: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """silu(gate) * up [* row_weights per row], gate and up [..rows.., F] alike; row_weights
    float32 [..rows..]. expert_offsets [E + 1] and expert_num_tokens [E] (dispatch's; both or
    neither): the experts' rows of the flattened [rows, F]; the others' h is undefined (zeros on
    the GPU) and their weights are not used. Differentiable with respect to gate, up and
    row_weights."""
    if (expert_offsets is None) != (expert_num_tokens is None):
        raise ValueError("swiglu: expert_offsets and expert_num_tokens go together")
    if not _fused(gate, up):
        return _torch_swiglu(gate, up, row_weights, expert_offsets, expert_num_tokens)
    from ._ext import ext

    ext()  # registers torch.ops.moe_a2a
    shape, cols = gate.shape, gate.shape[-1]
    gate2, up2 = gate.reshape(-1, cols).contiguous(), up.reshape(-1, cols).contiguous()
    if gate2.data_ptr() % 16 or up2.data_ptr() % 16:  # a view that starts inside a vector
        return _torch_swiglu(gate, up, row_weights, expert_offsets, expert_num_tokens)
    w = None if row_weights is None else row_weights.reshape(-1).float().contiguous()
    offsets, counts = (None, None) if expert_offsets is None else (_int32(expert_offsets), _int32(expert_num_tokens))
    return _SwiGLUFunction.apply(gate2, up2, w, offsets, counts).reshape(shape)


def _int32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int32).contiguous()
