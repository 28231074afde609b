"""Single-device reference of a SwiGLU Mixture-of-Experts layer: the router and all experts.

This is the ground truth the expert-parallel layer (moe_a2a.layers.ExpertParallelMoE) is
tested against. Like moe_a2a.reference it needs only torch (never the compiled extension)
and works on CPU or GPU tensors, with autograd.

    topk_idx, topk_weights = route(x, router_weight, topk)                # fp32 routing
    out = swiglu_experts_dense(x, topk_idx, topk_weights, w_gate, w_up, w_down)
    out = dense_moe(x, router_weight, w_gate, w_up, w_down, topk)         # both at once

Expert e computes (silu(x @ w_gate[e]) * (x @ w_up[e])) @ w_down[e] in the weights' dtype
(matmuls accumulate in fp32 internally and round once to that dtype, as on the GPU); the
router-weighted sum over a token's k experts is taken in fp32 and cast to x.dtype once.
``route`` is the one routing function: the expert-parallel layer calls it too, so the
expert choice of a token is identical in both.

``swiglu_experts_dense_loop`` spells the same computation token by token; it exists only so
tests can check the vectorised version against an obviously correct spelling.
"""

from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F

__all__ = [
    "route",
    "swiglu_experts_dense",
    "swiglu_experts_dense_loop",
    "dense_moe",
    "check_expert_weights",
]


def route(
    x: torch.Tensor, router_weight: torch.Tensor, topk: int, normalize: bool = True
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Top-k softmax router. Returns (topk_idx int64 [T, K], topk_weights float32 [T, K]).

    logits = x @ router_weight.t() in fp32 (whatever the dtypes of x and router_weight: the
    choice of experts is discrete, so it is made in one precision everywhere), softmax over
    the experts, the k largest probabilities in descending order (torch.topk, sorted), and
    with ``normalize`` those k divided by their sum. topk_weights is differentiable w.r.t.
    x and router_weight; topk_idx is not.
    """
    if x.dim() != 2:
        raise ValueError(f"route: x must be [T, H], got shape {tuple(x.shape)}")
    if router_weight.dim() != 2 or router_weight.shape[1] != x.shape[1]:
        raise ValueError(
            f"route: router_weight must be [num_experts, H={x.shape[1]}], got shape {tuple(router_weight.shape)}"
        )
    num_experts = router_weight.shape[0]
    if not 1 <= int(topk) <= num_experts:
        raise ValueError(f"route: topk must be in [1, num_experts={num_experts}], got {topk}")
    logits = x.float() @ router_weight.float().t()
    probs = torch.softmax(logits, dim=-1)
    weights, idx = torch.topk(probs, int(topk), dim=-1, sorted=True)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return idx.long(), weights.float()


def check_expert_weights(
    w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, hidden: int
) -> Tuple[int, int]:
    """(num_experts, ffn_dim) of w_gate / w_up [E, H, F] and w_down [E, F, H]; raises
    ValueError / TypeError naming the weight whose shape or dtype is wrong."""
    if w_gate.dim() != 3 or w_gate.shape[1] != hidden:
        raise ValueError(f"w_gate must be [num_experts, H={hidden}, ffn_dim], got shape {tuple(w_gate.shape)}")
    E, _, Fd = w_gate.shape
    if tuple(w_up.shape) != (E, hidden, Fd):
        raise ValueError(f"w_up must be [{E}, {hidden}, {Fd}] like w_gate, got shape {tuple(w_up.shape)}")
    if tuple(w_down.shape) != (E, Fd, hidden):
        raise ValueError(f"w_down must be [{E}, {Fd}, {hidden}], got shape {tuple(w_down.shape)}")
    if not (w_gate.dtype == w_up.dtype == w_down.dtype):
        raise TypeError(
            f"expert weights must share one dtype, got w_gate {w_gate.dtype}, w_up {w_up.dtype}, w_down {w_down.dtype}"
        )
    return int(E), int(Fd)


def _check_x(x):
    if x.dim() != 2:
        raise ValueError(f"x must be [T, H], got shape {tuple(x.shape)}")
    return int(x.shape[1])


def _check_routing(x, topk_idx, topk_weights, num_experts):
    T = x.shape[0]
    if topk_idx.dim() != 2 or topk_idx.shape[0] != T:
        raise ValueError(f"topk_idx must be [T={T}, K], got shape {tuple(topk_idx.shape)}")
    if tuple(topk_weights.shape) != tuple(topk_idx.shape):
        raise ValueError(
            f"topk_weights must have topk_idx's shape {tuple(topk_idx.shape)}, got {tuple(topk_weights.shape)}"
        )
    if topk_idx.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"topk_idx must be int32 or int64, got {topk_idx.dtype}")
    if topk_idx.numel() and (int(topk_idx.min()) < 0 or int(topk_idx.max()) >= num_experts):
        raise ValueError(f"topk_idx has an expert id outside [0, {num_experts})")


def _expert_mlp(xe: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    # Three matmuls and the SiLU product in the weights' dtype: each result is rounded to
    # that dtype once, like the grouped GEMMs of the expert-parallel layer.
    return (F.silu(xe @ w_gate) * (xe @ w_up)) @ w_down


def swiglu_experts_dense(
    x: torch.Tensor,
    topk_idx: torch.Tensor,
    topk_weights: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
) -> torch.Tensor:
    """out[t] = sum_k topk_weights[t, k] * (silu(x_t @ w_gate[e]) * (x_t @ w_up[e])) @ w_down[e],
    e = topk_idx[t, k], over ALL experts of w_* (w_gate, w_up [E, H, F], w_down [E, F, H]).

    One batch of matmuls per expert over the tokens that chose it (index_select), the
    weighted sum in fp32 (index_add), one cast to x.dtype at the end. Differentiable w.r.t.
    x, topk_weights and the weights; every expert's weights get a gradient (zero for an
    expert no token chose). Synchronises with the device once per expert (nonzero): a
    reference, not a fast path.
    """
    E, _ = check_expert_weights(w_gate, w_up, w_down, _check_x(x))
    _check_routing(x, topk_idx, topk_weights, E)
    T, H = x.shape
    K = topk_idx.shape[1]
    flat_idx = topk_idx.reshape(-1).long()
    flat_w = topk_weights.float().reshape(-1)
    xw = x.to(w_gate.dtype)
    acc = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    for e in range(E):
        # No skip for experts without tokens: the empty matmuls keep every expert in the
        # graph, so its weight gradient is a defined zero rather than missing.
        pair = torch.nonzero(flat_idx == e).squeeze(1)  # (token, k) pairs, row-major
        tok = pair // K
        y = _expert_mlp(xw.index_select(0, tok), w_gate[e], w_up[e], w_down[e])
        acc.index_add_(0, tok, flat_w.index_select(0, pair)[:, None] * y.float())
    return acc.to(x.dtype)


def swiglu_experts_dense_loop(
    x: torch.Tensor,
    topk_idx: torch.Tensor,
    topk_weights: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
) -> torch.Tensor:
    """Token-by-token spelling of ``swiglu_experts_dense`` (tests only): k ascending, fp32 sum."""
    E, _ = check_expert_weights(w_gate, w_up, w_down, _check_x(x))
    _check_routing(x, topk_idx, topk_weights, E)
    T, H = x.shape
    rows = []
    for t in range(T):
        acc = torch.zeros(H, dtype=torch.float32, device=x.device)
        xt = x[t : t + 1].to(w_gate.dtype)
        for k, e in enumerate(topk_idx[t].tolist()):
            y = _expert_mlp(xt, w_gate[e], w_up[e], w_down[e])[0]
            acc = acc + topk_weights[t, k].float() * y.float()
        rows.append(acc.to(x.dtype))
    return torch.stack(rows) if rows else x.new_zeros(0, H)


def dense_moe(
    x: torch.Tensor,
    router_weight: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    topk: int,
    normalize: bool = True,
) -> torch.Tensor:
    """``route`` then ``swiglu_experts_dense``: the whole MoE layer on one device."""
    topk_idx, topk_weights = route(x, router_weight, topk, normalize)
    return swiglu_experts_dense(x, topk_idx, topk_weights, w_gate, w_up, w_down)
