"""The experts' SwiGLU activation, h = silu(gate) * up, each row scaled by its router weight
where the experts apply the weights (AllToAll's weights_at_experts):

    h = swiglu(gate, up, row_weights=None, rows_used=None)      # gate, up [..rows.., F]

On a GPU it is one kernel each way (moe_a2a's swiglu / swiglu_backward ops,
csrc/experts/swiglu.h): the products in fp32, each output rounded once, and the backward gives
gate's, up's and the weights' gradients in one pass (the weights' a row sum, in a fixed order).
As torch ops the weighted activation took several passes over [rows, F], fp32 temporaries among
them, which cost the layer more than the backward of combine saves by not reading y
(docs/design/weights-at-experts.md). rows_used (one int32 on the GPU; packed: expert_offsets[-1])
leaves the rows at and past it out: their h and gradients are zeros. Elsewhere (CPU, a dtype or
width the kernel does not take) the same values come from torch ops, over every row.
"""

from typing import Optional

import torch
import torch.nn.functional as F

__all__ = ["swiglu"]

_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _fused(gate: torch.Tensor, up: torch.Tensor) -> bool:
    """Whether the kernel takes gate and up: a GPU, one of its dtypes, alike, F a multiple of a
    16-byte vector's elements (the inputs are made contiguous if they are not)."""
    if gate.device.type != "cuda" or gate.dtype not in _DTYPES or up.dtype != gate.dtype or up.shape != gate.shape:
        return False
    return gate.dim() >= 1 and gate.shape[-1] > 0 and gate.shape[-1] % (16 // gate.element_size()) == 0


def _torch_swiglu(gate, up, row_weights):
    h = F.silu(gate) * up
    return h if row_weights is None else (h * row_weights.unsqueeze(-1)).to(h.dtype)


class _SwiGLUFunction(torch.autograd.Function):
    """The fused op with its backward; 2-D [rows, F] contiguous inputs, row_weights [rows]."""

    @staticmethod
    def forward(ctx, gate, up, row_weights, rows_used):
        ctx.save_for_backward(gate, up, row_weights, rows_used)
        return torch.ops.moe_a2a.swiglu(gate, up, row_weights, rows_used)

    @staticmethod
    def backward(ctx, grad_h):
        gate, up, row_weights, rows_used = ctx.saved_tensors
        weight_grads = row_weights is not None and ctx.needs_input_grad[2]
        grad_gate, grad_up, grad_w = torch.ops.moe_a2a.swiglu_backward(
            grad_h.contiguous(), gate, up, row_weights, rows_used, weight_grads
        )
        return grad_gate, grad_up, grad_w if weight_grads else None, None


def swiglu(
    gate: torch.Tensor,
    up: torch.Tensor,
    row_weights: Optional[torch.Tensor] = None,
    rows_used: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """silu(gate) * up [* row_weights per row], gate and up [..rows.., F] alike; row_weights
    float32 [..rows..]; rows_used: rows [0, rows_used) of the flattened rows are computed, the
    others are zeros (on the GPU; elsewhere every row is computed). Differentiable with respect
    to gate, up and row_weights."""
    if not _fused(gate, up):
        return _torch_swiglu(gate, up, row_weights)
    from ._ext import ext

    ext()  # registers torch.ops.moe_a2a
    shape, cols = gate.shape, gate.shape[-1]
    gate2, up2 = gate.reshape(-1, cols).contiguous(), up.reshape(-1, cols).contiguous()
    if gate2.data_ptr() % 16 or up2.data_ptr() % 16:  # a view that starts inside a vector
        return _torch_swiglu(gate, up, row_weights)
    w = None if row_weights is None else row_weights.reshape(-1).float().contiguous()
    used = None if rows_used is None else rows_used.reshape(1).to(torch.int32)
    return _SwiGLUFunction.apply(gate2, up2, w, used).reshape(shape)
