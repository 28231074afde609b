"""The rounds as torch ops: the route a dispatch leaves (what combine and the backward rounds
replay), one helper per op (the one place its argument order is written), and dispatch and
combine as autograd functions, each backward a round of its own on the same AllToAll
(docs/design/protocol.md, "Backward rounds"). all_to_all.AllToAll calls them."""

from typing import NamedTuple

import torch

from ._ext import ext


class _Route(NamedTuple):
    """Where a dispatch put every row: what combine and the backward rounds replay. The one
    Python spelling of a route: it crosses torch.autograd.Function.apply as *route (apply
    tracks top-level tensors only) and is rebuilt with _Route(*tensors); the ops take it
    through the _..._round helpers below, each the one place its argument order is written."""

    # [T] int32, token side: bit r = token went to rank r; bit kUnusedSlotBit (8) + k = its slot k is unused
    # (ep/kernels.h: combine's backward gives that weight a zero gradient)
    dest_mask: torch.Tensor
    src_tokens: torch.Tensor  # [world] int32, expert side: tokens each source dispatched
    recv_token: torch.Tensor  # [world * max_tokens] int32: source token of each received slot, or -1
    recv_pos: torch.Tensor  # [world * max_tokens, topk] int32: row of expert_x of each (slot, k), or < 0: none


class _DispatchOutputs(NamedTuple):
    """What the dispatch ops return, by name and in order: csrc/bindings/ops.cpp
    DispatchOutputs (checked against its dispatch_output_names() when an AllToAll is made)."""

    expert_x: torch.Tensor
    expert_x_scale: torch.Tensor  # [..rows.., scale blocks] with fp8 rows, else [..rows.., 0]
    expert_num_tokens: torch.Tensor
    expert_offsets: torch.Tensor
    expert_meta: torch.Tensor
    expert_weights: torch.Tensor
    src_tokens: torch.Tensor
    recv_token: torch.Tensor
    recv_pos: torch.Tensor

    def route(self, dest_mask: torch.Tensor) -> _Route:
        return _Route(dest_mask, self.src_tokens, self.recv_token, self.recv_pos)


def _check_dispatch_outputs_match_core():
    names = tuple(ext().dispatch_output_names())
    if names != _DispatchOutputs._fields:
        raise RuntimeError(
            f"moe_a2a: the compiled core returns dispatch outputs {names}, this Python expects "
            f"{_DispatchOutputs._fields}: rebuild the extension"
        )


def _dispatch_round(engine: int, state: torch.Tensor, x, x_scale, topk_idx, topk_weights):
    """One kernel launch: both halves of dispatch. Returns (_DispatchOutputs, dest_mask)."""
    *out, dest_mask = torch.ops.moe_a2a.dispatch(engine, state, x, x_scale, topk_idx, topk_weights)
    return _DispatchOutputs(*out), dest_mask


def _combine_round(engine: int, state: torch.Tensor, expert_y, expert_weights, route: _Route):
    """One kernel launch: both halves of combine."""
    return torch.ops.moe_a2a.combine(
        engine, state, expert_y, expert_weights, route.src_tokens, route.recv_token, route.recv_pos, route.dest_mask
    )


def _dispatch_backward_round(
    engine: int, grad_expert_x, route: _Route, weights_at_experts=False, grad_expert_weights=None, weight_grads=False
):
    """The backward of dispatch: an unweighted combine of the rows' gradients over the route.
    Returns (grad x, grad topk_weights). With the weights at the experts, the expert side also
    sends each pair's grad_expert_weights (None: 0) home; the second is [T, topk] if
    weight_grads, else empty (each rank decides for itself)."""
    state = _backward_state(route.dest_mask)
    if grad_expert_weights is not None:
        grad_expert_weights = grad_expert_weights.float().contiguous()
    return torch.ops.moe_a2a.dispatch_backward(
        engine,
        state,
        grad_expert_x.contiguous(),
        grad_expert_weights,
        route.src_tokens,
        route.recv_token,
        route.recv_pos,
        route.dest_mask,
        weights_at_experts,
        weight_grads,
    )


def _combine_backward_round(
    engine: int, grad_out, expert_y, expert_weights, offsets, counts, route: _Route, weight_grads: bool = True
):
    """The backward of combine (one kernel): returns (grad expert_y, grad topk_weights). Without
    weight_grads the second is empty and the expert ranks do not read expert_y for this rank's
    rows (each rank decides for itself; the kernel tells the others)."""
    state = _backward_state(route.dest_mask)
    return torch.ops.moe_a2a.combine_backward(
        engine,
        state,
        grad_out.contiguous(),
        expert_y,
        expert_weights,
        offsets,
        counts,
        route.src_tokens,
        route.recv_token,
        route.recv_pos,
        route.dest_mask,
        weight_grads,
    )


def _backward_state(like: torch.Tensor) -> torch.Tensor:
    """The ordering token of one backward round. A fresh one, not the AllToAll's: under
    torch.compile, a tensor the backward reads is saved from the forward with a version
    check, and the AllToAll's token is mutated by every later round."""
    return torch.empty(1, dtype=torch.int64, device=like.device)


class _DispatchFunction(torch.autograd.Function):
    """dispatch with autograd: the gradient of x[t] is the sum of the gradients of the rows
    that carried token t, sent back by an unweighted combine over the forward's route. With the
    weights at the experts, expert_weights is differentiable too, and the same round carries each
    pair's weight gradient back to topk_weights (docs/design/weights-at-experts.md)."""

    @staticmethod
    def forward(ctx, engine, state, x, topk_idx, topk_weights, weights_at_experts):
        out, dest_mask = _dispatch_round(engine, state, x, None, topk_idx, topk_weights)
        ctx.engine, ctx.weights_at_experts = engine, weights_at_experts
        ctx.save_for_backward(*out.route(dest_mask))
        differentiable = ("expert_x", "expert_weights") if weights_at_experts else ("expert_x",)
        ctx.mark_non_differentiable(*(t for n, t in zip(out._fields, out) if n not in differentiable), dest_mask)
        # The outputs without a gradient would each get a zero-filled one (an allocation and a
        # kernel per backward) that backward never reads.
        ctx.set_materialize_grads(False)
        ctx.expert_x_like = (out.expert_x.shape, out.expert_x.dtype)
        return (*out, dest_mask)

    @staticmethod
    def backward(ctx, grad_expert_x, *grads):
        if grad_expert_x is None:  # no gradient path reached expert_x (only expert_weights); the
            # round is collective, so it runs anyway
            shape, dtype = ctx.expert_x_like
            grad_expert_x = torch.zeros(shape, dtype=dtype, device=ctx.saved_tensors[0].device)
        grad_expert_weights = grads[_DispatchOutputs._fields.index("expert_weights") - 1]
        weight_grads = ctx.weights_at_experts and ctx.needs_input_grad[4]
        grad_x, grad_w = _dispatch_backward_round(
            ctx.engine,
            grad_expert_x,
            _Route(*ctx.saved_tensors),
            ctx.weights_at_experts,
            grad_expert_weights if ctx.weights_at_experts else None,
            weight_grads,
        )
        return None, None, grad_x, None, grad_w if weight_grads else None, None


class _CombineFunction(torch.autograd.Function):
    """combine with autograd: grad_out goes back along the forward's route; the expert side
    returns grad_expert_y[row] = w * grad_out[t] and sends grad w = <grad_out[t], y(row)> home."""

    @staticmethod
    def forward(ctx, engine, state, expert_y, topk_weights, expert_x, expert_weights, offsets, counts, *route):
        # topk_weights: same values as expert_weights (both from dispatch); here for its gradient.
        # expert_x: dispatch's differentiable output, given no gradient here; the edge makes every
        # rank run dispatch's backward after this one (AllToAll.combine).
        del topk_weights, expert_x
        ctx.engine = engine
        ctx.save_for_backward(expert_y, expert_weights, offsets, counts, *route)
        return _combine_round(engine, state, expert_y, expert_weights, _Route(*route))

    @staticmethod
    def backward(ctx, grad_out):
        expert_y, expert_weights, offsets, counts, *route = ctx.saved_tensors
        # topk_weights (input 3) without a gradient to compute: the round skips the weights'
        # dot products and their read of expert_y, the largest read of the round.
        weight_grads = ctx.needs_input_grad[3]
        grad_y, grad_w = _combine_backward_round(
            ctx.engine, grad_out, expert_y, expert_weights, offsets, counts, _Route(*route), weight_grads
        )
        return (None, None, grad_y, grad_w if weight_grads else None, None, None, None, None) + (None,) * len(route)


def _needs_grad(*tensors) -> bool:
    # A loop, not any() over a generator: this runs on every call, and the generator cost about
    # a tenth of dispatch()'s own Python time.
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if t is not None and t.requires_grad:
            return True
    return False
