"""The in-node exchange of a node with one rank (docs/design/multinode.md): dispatch and combine
with nobody to exchange with, in plain torch, the packed layout AllToAll delivers. Fixed shapes
and no host synchronisation (a CUDA graph can hold it), differentiable like AllToAll's calls.
MultiNodeAllToAll uses it where ranks_per_node is 1."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from .node_legs import UNUSED, as_bytes, from_bytes


class LocalExchange:
    """dispatch(x [T, H], topk_idx [T, K], topk_weights [T, K]) -> rows grouped by expert, packed:
    expert_x [T x K, H] (rows of no expert, at the end, are zeros), expert_offsets [E + 1] and
    expert_num_tokens [E] (int32), expert_weights [T x K], expert_meta [T x K, 3] (rank 0,
    token, k; -1 for a row of no expert). With x_scale [T, blocks] (rows already fp8, as
    AllToAll's dispatch takes them), x's bytes move as they are and expert_x_scale [T x K, blocks]
    comes with them (zeros in rows of no expert); else expert_x_scale is None. combine(y, d) ->
    [T, H]: out[t] = sum over k, in ascending k, of w[t, k] * y(t, k) in fp32, cast once to y's
    dtype."""

    layout = "packed"

    def __init__(self, num_experts: int, experts_per_token: int, hidden_dim: int, max_num_tokens: int, dtype):
        self.num_experts, self.topk, self.hidden = int(num_experts), int(experts_per_token), int(hidden_dim)
        self.max_num_tokens, self.dtype = int(max_num_tokens), dtype

    def dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor, x_scale=None):
        T, K = topk_idx.shape
        if T > self.max_num_tokens or K != self.topk or x.shape != (T, self.hidden):
            raise ValueError(
                f"moe_a2a: LocalExchange of {self.max_num_tokens} tokens, top-{self.topk}, hidden {self.hidden} got "
                f"x {list(x.shape)} and topk_idx {list(topk_idx.shape)}"
            )
        ids = topk_idx.long().reshape(-1)
        used = ids != UNUSED
        key = torch.where(used, ids, torch.full_like(ids, self.num_experts))  # no expert: last
        order = torch.sort(key, stable=True).indices  # by expert, then (token, k): pair p = t * K + k
        used_sorted = used[order].unsqueeze(1)

        def rows_of(t):  # t's row of each (token, k) in that order; zeros where no expert
            b = as_bytes(t)
            return from_bytes(
                torch.where(used_sorted, b[order // K], torch.zeros((), dtype=b.dtype, device=b.device)), t.dtype
            )

        rows = rows_of(x)
        counts = torch.zeros(self.num_experts + 1, dtype=torch.long, device=x.device).scatter_add_(
            0, key, torch.ones_like(key)
        )[: self.num_experts]
        offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        meta = torch.stack([torch.zeros_like(order), order // K, order % K], dim=1)
        meta = torch.where(used_sorted, meta, torch.full_like(meta, UNUSED))
        weights = torch.where(used[order], topk_weights.reshape(-1)[order], torch.zeros((), device=x.device))
        return SimpleNamespace(
            expert_x=rows,
            expert_x_scale=rows_of(x_scale) if x_scale is not None else None,
            expert_offsets=offsets.int(),
            expert_num_tokens=counts.int(),
            expert_weights=weights.float(),
            expert_meta=meta.int(),
            _order=order,
            _used=used,
            _tokens=T,
        )

    def combine(self, expert_y: torch.Tensor, dispatched) -> torch.Tensor:
        d = dispatched
        T, K = d._tokens, self.topk
        # Back to (token, k) order, then the k-ascending weighted sum the AllToAll's combine does.
        pairs = torch.zeros(T * K, self.hidden, dtype=torch.float32, device=expert_y.device)
        pairs = pairs.index_copy(0, d._order, expert_y.float() * d.expert_weights.unsqueeze(1))
        pairs = torch.where(d._used.unsqueeze(1), pairs, torch.zeros((), device=pairs.device))
        acc = torch.zeros(T, self.hidden, dtype=torch.float32, device=expert_y.device)
        pairs = pairs.view(T, K, self.hidden)
        for k in range(K):
            acc = acc + pairs[:, k]
        return acc.to(expert_y.dtype)

    def synchronize(self) -> None:  # nothing of its own in flight; the caller's stream is the caller's
        pass

    def close(self) -> None:
        pass
