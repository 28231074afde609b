"""Dispatch and combine over a group that spans nodes (docs/design/multinode.md, issue 39): a
token crosses the network once per node it has experts on, to the rank of the same rail there,
and fans out inside that node over today's AllToAll; combine reduces inside the node first and
crosses the network once per token and node. The network legs are one torch.distributed
all_to_all_single each over each rail's group (NCCL or RCCL on GPUs), at a fixed capacity per node,
so no count goes to the host; dispatch's rows, fp8 scales, ids and weights travel in one byte
record per node and slot (node_legs.dispatch_record; docs/design/multinode.md, "The dispatch
record"). Run on the CPU (tests/python/cpu/test_multinode.py) and on two GPUs as
emulated nodes (tests/python/gpu/test_multinode.py); never across machines. Timed on one machine
as emulated nodes, next to all_to_all_single of the same bytes: benchmarks/bench_multinode.py.

    ep = MultiNodeAllToAll(group, num_experts, experts_per_token, hidden_dim, max_num_tokens, dtype,
                           ranks_per_node=None, node_capacity=None, dispatch_dtype=None)   # collective
    d = ep.dispatch(x, topk_idx, topk_weights)      # d.expert_x etc.: this rank's experts' rows, packed
    out = ep.combine(expert_y, d)                   # [T, H]
    ep.close()

What the experts see is the in-node AllToAll's Dispatched (packed layout), whose tokens are this
rank's own T tokens followed by the rows forwarded to it from every other node, node_capacity
each (expert_meta's source tokens index that list). Each node's partial sum is cast to the token
dtype once before the nodes' partials are summed (in fp32, node order).

fp8 dispatch (dispatch_dtype=, as AllToAll's): the sending rank quantizes its tokens once
(moe_a2a.reference.quantize_fp8, the kernels' arithmetic op for op), or takes rows the caller
quantized (x_scale=); the fp8 rows and their scales cross the network and enter the in-node
exchange as they are (no second quantization), so the experts get what a one-node AllToAll with
the same dispatch_dtype delivers. Combine stays in the token dtype.

The steps of dispatch, pack -> dispatch_leg -> the in-node exchange, and combine's combine_leg
are methods of their own so that a benchmark can time the network legs alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch.autograd.function import once_differentiable

from . import all_to_all as _all_to_all
from .fp8_formats import FP8_FORMATS, check_dispatch_dtype
from .local_exchange import LocalExchange
from .node_legs import (
    RowPlan,
    dispatch_record,
    experts_per_node,
    gather_slots,
    in_node_tokens,
    pack_records,
    pack_rows,
    plan_rows,
    record_layout,
    sum_partials,
    unpack_records,
)
from .nodes import NodeLayout
from .reference import quantize_fp8


@dataclass
class MultiNodeDispatched:
    """The in-node exchange's Dispatched (what this rank's experts work on), and what combine
    needs to send the nodes' partial sums home."""

    inner: object
    plan: RowPlan
    num_tokens: int

    def __getattr__(self, name):  # expert_x, expert_offsets, expert_num_tokens, ...: the in-node ones
        if name in ("inner", "plan", "num_tokens"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def _subgroups(group, layout: NodeLayout):
    """(this rank's node group, this rank's rail group): every rank creates every one of them,
    in the same order, as torch.distributed requires."""
    ranks = dist.get_process_group_ranks(group)  # group rank -> global rank
    me = dist.get_rank(group)
    node_groups = [dist.new_group([ranks[r] for r in layout.node_ranks(n)]) for n in range(layout.num_nodes)]
    rail_groups = [dist.new_group([ranks[r] for r in layout.rail_ranks(g)]) for g in range(layout.ranks_per_node)]
    return node_groups[layout.node_of(me)], rail_groups[layout.rail_of(me)], node_groups + rail_groups


def _rail_exchange(t: torch.Tensor, group) -> torch.Tensor:
    """t [N, ...] floating -> [N, ...]: slice n goes to the rail's rank on node n, slice n of the
    result came from it. Differentiable (the combine leg)."""
    return dist_fn.all_to_all_single(torch.empty_like(t), t.contiguous(), group=group)


def _exchange_bytes(buf: torch.Tensor, group) -> torch.Tensor:
    """buf [N, ...] uint8 -> [N, ...]: one all_to_all_single, slice n to the rail's rank on node n."""
    out = torch.empty_like(buf)
    dist.all_to_all_single(out, buf, group=group)
    return out


class _RecordExchange(torch.autograd.Function):
    """tensors [N, cap, w_i] -> what the rail's rank on node n sent in its slice n, each tensor
    in its record dtype: all of them packed into one uint8 record per (node, slot) (layout),
    moved by one all_to_all_single, and unpacked as views of the received buffer. The backward
    is the same exchange run backwards (an all-to-all is its own transpose over the rail): the
    gradients of the fields listed in `grads` (rows and weights) packed into one record of their
    own (record_layout of those fields), one all_to_all_single, unpacked; the other fields (ids,
    fp8 rows, fp8 scales) carry none. `grads` comes from the fields' dtypes, not from what
    requires grad, so that every rank of a rail makes the same backward call."""

    @staticmethod
    def forward(ctx, group, layout, grads, *tensors):
        recv = unpack_records(_exchange_bytes(pack_records(tensors, layout), group), layout)
        ctx.group, ctx.num, ctx.grads = group, len(tensors), grads
        ctx.back = record_layout([(recv[i].dtype, recv[i].shape[-1]) for i in grads])
        ctx.mark_non_differentiable(*(t for i, t in enumerate(recv) if i not in ctx.grads))
        return tuple(recv)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        back = _exchange_bytes(pack_records([grads[i] for i in ctx.grads], ctx.back), ctx.group)
        out = [None] * ctx.num
        for i, g in zip(ctx.grads, unpack_records(back, ctx.back)):
            out[i] = g
        return (None, None, None, *out)


def pack_sends(x, topk_idx, topk_weights, x_scale, num_experts: int, num_nodes: int, node_capacity: int, me: int):
    """Step 1 of dispatch on a rank of node `me`: (its RowPlan, what it sends each node: x, ids
    and weights [N, cap, ...], with fp8 rows (x_scale not None) their scales too)."""
    plan = plan_rows(topk_idx, num_experts, num_nodes, node_capacity, me)
    sent = pack_rows(x, topk_idx, topk_weights, plan, num_experts, num_nodes)
    return plan, sent if x_scale is None else (*sent, gather_slots(x_scale, plan))


def dispatch_leg_record(sent, num_experts: int, num_nodes: int):
    """The RecordLayout (node_legs.dispatch_record) the dispatch leg sends pack_sends' tensors
    (x, ids, weights[, scales]) in: row, fp8 scales, ids, weights, one record per (node, slot)."""
    x, ids, w = sent[:3]
    scale_blocks = sent[3].shape[-1] if len(sent) > 3 else None
    experts_in_node = experts_per_node(num_experts, num_nodes)
    return dispatch_record(x.dtype, x.shape[-1], ids.shape[-1], w.dtype, experts_in_node, scale_blocks)


class MultiNodeAllToAll:
    def __init__(
        self,
        group,
        num_experts: int,
        experts_per_token: int,
        hidden_dim: int,
        max_num_tokens: int,
        dtype: torch.dtype = torch.bfloat16,
        *,
        ranks_per_node: Optional[int] = None,
        node_capacity: Optional[int] = None,
        dispatch_dtype: Optional[torch.dtype] = None,
        fp8_pow2_scales: bool = False,
        **all_to_all_kwargs,
    ):
        """Collective over `group`, same arguments on every rank. The node layout comes from
        the ranks' hostnames or ranks_per_node (NodeLayout.of_group). node_capacity (default
        max_num_tokens: no routing overflows it) is the rows each rank sends each other node per
        dispatch; the in-node exchange takes max_num_tokens + num_nodes x node_capacity tokens a
        rank (the AllToAll: at most 4096). The in-node exchange is an AllToAll over the node's
        ranks (all_to_all_kwargs go to it; its layout is always packed), or, on nodes of one rank,
        a LocalExchange. dispatch_dtype and fp8_pow2_scales: fp8 dispatch, as AllToAll's
        (forward only: dispatch raises if x requires grad)."""
        group = group if group is not None else dist.group.WORLD
        self.layout = NodeLayout.of_group(group, ranks_per_node)
        self.num_experts, self.topk, self.hidden = int(num_experts), int(experts_per_token), int(hidden_dim)
        self.max_num_tokens = int(max_num_tokens)
        self.node_capacity = int(node_capacity) if node_capacity is not None else self.max_num_tokens
        if self.node_capacity < 1:
            raise ValueError(f"moe_a2a: node_capacity must be >= 1, got {node_capacity}")
        check_dispatch_dtype(dispatch_dtype)
        self.dispatch_dtype, self.fp8_pow2_scales = dispatch_dtype, bool(fp8_pow2_scales)
        experts_in_node = experts_per_node(self.num_experts, self.layout.num_nodes)
        self.rank = dist.get_rank(group)
        self.node = self.layout.node_of(self.rank)
        self.node_group, self.rail_group, self._groups = _subgroups(group, self.layout)
        in_node_tokens_max = self.max_num_tokens + self.layout.num_nodes * self.node_capacity
        all_to_all_kwargs.update(layout="packed", dispatch_dtype=dispatch_dtype, fp8_pow2_scales=self.fp8_pow2_scales)
        self._overflow = None  # device flag: a dispatch since the last synchronize() overflowed a node
        if self.layout.ranks_per_node == 1:
            self.in_node = LocalExchange(experts_in_node, self.topk, self.hidden, in_node_tokens_max, dtype)
        else:
            self.in_node = _all_to_all.AllToAll(
                self.node_group,
                experts_in_node,
                self.topk,
                self.hidden,
                in_node_tokens_max,
                dtype,
                **all_to_all_kwargs,
            )

    def dispatch(
        self,
        x: torch.Tensor,
        topk_idx: torch.Tensor,
        topk_weights: torch.Tensor,
        x_scale: Optional[torch.Tensor] = None,
    ) -> MultiNodeDispatched:
        """As AllToAll.dispatch: with fp8 dispatch, x is quantized here, or, with x_scale
        [T, ceil(H / 128)] float32, x is already fp8 (dispatch_dtype) and is sent as given."""
        x, x_scale = self.send_rows(x, x_scale)
        plan, sent = self.pack(x, topk_idx, topk_weights, x_scale)
        recv = self.dispatch_leg(sent)
        N = self.layout.num_nodes
        x_in, ids_in, w_in = in_node_tokens(x, topk_idx, topk_weights, self.node, *recv[:3], self.num_experts, N)
        scale_in = None if x_scale is None else torch.cat([x_scale, recv[3].reshape(-1, x_scale.shape[1])])
        inner = self.in_node.dispatch(x_in, ids_in, w_in, x_scale=scale_in)
        # A node that got more rows than node_capacity lost some: reported by synchronize(),
        # as the in-node exchange reports an expert over capacity (no host sync here).
        self._overflow = plan.overflow if self._overflow is None else self._overflow | plan.overflow
        return MultiNodeDispatched(inner, plan, int(x.shape[0]))

    def send_rows(self, x, x_scale=None):
        """(the rows dispatch sends, their fp8 scales or None), after the checks."""
        if x.dim() != 2 or x.shape[0] > self.max_num_tokens:
            raise ValueError(
                f"moe_a2a: x must be [T, hidden] with T <= max_num_tokens={self.max_num_tokens}, got {list(x.shape)}"
            )
        if self.dispatch_dtype is None:
            if x_scale is not None:
                raise ValueError("moe_a2a: x_scale is for an all-to-all with fp8 dispatch (dispatch_dtype=)")
            return x, None
        if x.requires_grad:
            raise RuntimeError(
                "moe_a2a: fp8 dispatch is forward-only and x requires grad; for training create the "
                "MultiNodeAllToAll without dispatch_dtype, or dispatch under torch.no_grad()"
            )
        if x_scale is None:
            return quantize_fp8(x, self.dispatch_dtype, self.fp8_pow2_scales)
        if x.dtype != self.dispatch_dtype:
            raise TypeError(f"moe_a2a: x with x_scale must be {self.dispatch_dtype}, got {x.dtype}")
        return x, x_scale

    def pack(self, x, topk_idx, topk_weights, x_scale=None):
        """Step 1 (pack_sends) for this rank."""
        return pack_sends(
            x, topk_idx, topk_weights, x_scale, self.num_experts, self.layout.num_nodes, self.node_capacity, self.node
        )

    def dispatch_record(self, sent):
        """The dispatch leg's record for pack()'s tensors (dispatch_leg_record)."""
        return dispatch_leg_record(sent, self.num_experts, self.layout.num_nodes)

    def dispatch_leg(self, sent):
        """Step 2, the network: pack()'s tensors over this rank's rail, slice n to node n, in one
        all_to_all_single of one byte record per (node, slot) (dispatch_record). Returns them in
        pack()'s order (x, ids, weights[, scales]) as views of the received buffer; the ids in
        their record dtype (int32: in_node_tokens widens them)."""
        x, ids, w, *scales = sent  # in the record: x, scales, ids, w
        grads = (len(scales) + 2,) if x.dtype in FP8_FORMATS else (0, len(scales) + 2)  # fp8 rows carry none
        recv = _RecordExchange.apply(self.rail_group, self.dispatch_record(sent), grads, x, *scales, ids, w)
        return (recv[0], recv[-2], recv[-1], *recv[1:-2])

    def combine_leg(self, partials: torch.Tensor) -> torch.Tensor:
        """Step 5, the network: partials [N, cap, H] back over the rail, slice n to node n."""
        return _rail_exchange(partials, self.rail_group)

    def combine(self, expert_y: torch.Tensor, dispatched: MultiNodeDispatched) -> torch.Tensor:
        out_in = self.in_node.combine(expert_y, dispatched.inner)
        T, N = dispatched.num_tokens, self.layout.num_nodes
        partials = out_in[T:].reshape(N, self.node_capacity, self.hidden)  # by the node the rows came from
        back = self.combine_leg(partials)
        return sum_partials(out_in[:T], back, dispatched.plan, self.node)

    def synchronize(self) -> None:
        """Waits for this rank's work, then raises any error: the in-node exchange's, or a
        dispatch since the last call that had more rows for a node than node_capacity."""
        self.in_node.synchronize()
        overflow, self._overflow = self._overflow, None
        if overflow is not None and bool(overflow):
            raise RuntimeError(
                f"moe_a2a: a dispatch had more rows for another node than node_capacity={self.node_capacity}; "
                "the rows past it were dropped: pass a larger node_capacity"
            )

    def close(self) -> None:
        """Closes the in-node AllToAll and destroys the node and rail groups this object made
        (collective, as their creation was)."""
        if self.in_node is not None:
            self.in_node.close()
            self.in_node = None
        for g in self._groups:
            dist.destroy_process_group(g)
        self._groups = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
