"""The network legs of the planned multi-node dispatch and combine (docs/design/multinode.md,
issue 39), in plain torch: what a rank packs for each other node, what the in-node exchange
gets as its tokens, and how the nodes' partial sums come back together. Fixed shapes and no
host synchronisation (so a CUDA graph can hold them); which rows are real travels in tensors.

For a rank on node `me` of N nodes with T tokens and `cap` = node_capacity rows per node:
    plan = plan_rows(topk_idx, num_experts, N, cap, me)       # which token goes to which node, where
    send_x, send_ids, send_w = pack_rows(x, topk_idx, topk_weights, plan, num_experts, N)
    # network leg: send_*[n] to the rank of node n on this rank's rail, receive recv_*[n] from it,
    # all of them in one byte record per (node, slot) (dispatch_record, pack_records, unpack_records)
    x_in, ids_in, w_in = in_node_tokens(x, topk_idx, topk_weights, me, recv_x, recv_ids, recv_w, num_experts, N)
    # in-node dispatch -> experts -> combine over x_in (node-local expert ids): out_in [T + N x cap, H]
    partials = out_in[T:].view(N, cap, H)                   # back to where each row came from
    # network leg: partials[n] to the rank of node n on this rank's rail, receive back[n] from it
    out = sum_partials(out_in[:T], back, plan, me)

The rows a rank packs for its own node are never sent (its own tokens are the first T in-node
tokens), so send_*[me] and recv_*[me] stay empty; keeping them keeps the shapes one all-to-all
over the rail. Run on GPUs as emulated nodes (tests/python/gpu/test_multinode.py), never across machines.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .fp8_formats import FP8_FORMATS

UNUSED = -1  # an unused (token, k) slot, as AllToAll takes it
RECORD_ALIGN = 16  # bytes: a record's size is a multiple of it


class RowPlan(NamedTuple):
    """Where one rank's tokens go, for one dispatch."""

    token: torch.Tensor  # [N, cap] int64: the token packed in slot s for node n; -1 for none
    slot: torch.Tensor  # [T, N] int64: token t's slot in node n's rows; -1 if t has no expert there
    count: torch.Tensor  # [N] int64: rows for each node, capped at cap
    overflow: torch.Tensor  # [] bool: some node got more than cap rows (they are dropped: an error)


def experts_per_node(num_experts: int, num_nodes: int) -> int:
    if num_nodes < 1 or num_experts % num_nodes != 0:
        raise ValueError(f"moe_a2a: {num_experts} experts do not split evenly over {num_nodes} nodes")
    return num_experts // num_nodes


def node_of_expert(topk_idx: torch.Tensor, num_experts: int, num_nodes: int) -> torch.Tensor:
    """The node of each (token, k)'s expert; -1 for an unused slot."""
    node = topk_idx.long() // experts_per_node(num_experts, num_nodes)
    return torch.where(topk_idx.long() == UNUSED, torch.full_like(node, -1), node)


def plan_rows(topk_idx: torch.Tensor, num_experts: int, num_nodes: int, node_capacity: int, me: int) -> RowPlan:
    """A row per (token, other node it has an expert on), tokens in ascending order, at most
    node_capacity per node; none for node `me` (this rank's own node: its tokens are the
    in-node exchange's first tokens)."""
    T = topk_idx.shape[0]
    node = node_of_expert(topk_idx, num_experts, num_nodes)  # [T, K]
    nodes = torch.arange(num_nodes, device=topk_idx.device)
    hit = (node.unsqueeze(-1) == nodes).any(dim=1) & (nodes != me)  # [T, N]
    slot = torch.where(hit, hit.long().cumsum(0) - 1, torch.full_like(hit, -1, dtype=torch.long))
    kept = hit & (slot < node_capacity)
    slot = torch.where(kept, slot, torch.full_like(slot, -1))
    token = torch.full((num_nodes, node_capacity + 1), -1, dtype=torch.long, device=topk_idx.device)
    rows = torch.arange(T, device=topk_idx.device).unsqueeze(1).expand(T, num_nodes)
    where = torch.where(kept, slot, torch.full_like(slot, node_capacity))  # dropped rows: a spill column
    token.scatter_(1, where.t(), torch.where(kept, rows, torch.full_like(rows, -1)).t())
    count = hit.sum(0)
    return RowPlan(token[:, :node_capacity], slot, count.clamp(max=node_capacity), (count > node_capacity).any())


def node_local_ids(topk_idx: torch.Tensor, node: int, num_experts: int, num_nodes: int) -> torch.Tensor:
    """topk_idx as node `node`'s in-node exchange sees it: its experts renumbered from 0, every
    other slot unused."""
    per_node = experts_per_node(num_experts, num_nodes)
    local = topk_idx.long() - node * per_node
    mine = node_of_expert(topk_idx, num_experts, num_nodes) == node
    return torch.where(mine, local, torch.full_like(local, UNUSED))


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """An fp8 tensor seen as uint8 (the same bytes), anything else as it is: torch has no
    masked_fill, index_copy or collective for fp8 everywhere, and moving fp8 rows needs none of
    their arithmetic."""
    return t.view(torch.uint8) if t.dtype in FP8_FORMATS else t


def from_bytes(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """as_bytes undone (a view of another dtype is no autograd op, so only for fp8)."""
    return t.view(dtype) if dtype in FP8_FORMATS else t


def gather_slots(t: torch.Tensor, plan: RowPlan) -> torch.Tensor:
    """t [T, ...] -> [N, cap, ...]: slot s of node n holds t[plan.token[n, s]], an empty slot
    zeros. Gathered straight from t (no copy of t); with no token, from one zero row, still in
    t's autograd graph, so that every rank's backward makes the same network calls."""
    rows = as_bytes(t)
    if rows.shape[0] == 0:
        rows = torch.cat([rows, rows.new_zeros(1, *rows.shape[1:])])
    empty = (plan.token < 0).view(*plan.token.shape, *([1] * (rows.dim() - 1)))
    return from_bytes(rows[plan.token.clamp(min=0)].masked_fill(empty, 0), t.dtype)


def pack_rows(x, topk_idx, topk_weights, plan: RowPlan, num_experts: int, num_nodes: int):
    """(send_x [N, cap, H], send_ids [N, cap, K] node-local, send_w [N, cap, K]): node n's rows
    in slot order; an empty slot has a zero row, every id unused and zero weights. x may be fp8
    (its bytes are moved as they are)."""
    send_x = gather_slots(x, plan)
    send_w = gather_slots(topk_weights, plan)
    # Only the packed rows' ids, each renumbered for the node it goes to (node_local_ids, per node n).
    ids = gather_slots(topk_idx.long(), plan)  # [N, cap, K]
    nodes = torch.arange(num_nodes, device=ids.device).view(-1, 1, 1)
    local = ids - nodes * experts_per_node(num_experts, num_nodes)
    ids = torch.where(node_of_expert(ids, num_experts, num_nodes) == nodes, local, torch.full_like(local, UNUSED))
    return send_x, ids.masked_fill((plan.token < 0).unsqueeze(-1), UNUSED), send_w


def in_node_tokens(x, topk_idx, topk_weights, me: int, recv_x, recv_ids, recv_w, num_experts: int, num_nodes: int):
    """The in-node exchange's tokens on this rank: its own T tokens (only node `me`'s experts),
    then the rows received from every node in node order, cap each (node `me`'s empty)."""
    H, K = x.shape[1], topk_idx.shape[1]
    own_ids = node_local_ids(topk_idx, me, num_experts, num_nodes)
    x_in = torch.cat([x, recv_x.reshape(-1, H).to(x.dtype)])
    ids_in = torch.cat([own_ids, recv_ids.reshape(-1, K).long()])
    w_in = torch.cat([topk_weights, recv_w.reshape(-1, K).to(topk_weights.dtype)])
    return x_in, ids_in, w_in


class RecordLayout(NamedTuple):
    """One fixed-size byte record per (node, slot) holding several fields: field i is widths[i]
    elements of dtypes[i] at byte offsets[i], each offset a multiple of its element size, and
    size (a multiple of RECORD_ALIGN) bytes in all, so that every field of a [N, cap, size] byte
    buffer is a valid view of its dtype. The bytes between and after the fields are zeros."""

    dtypes: tuple
    widths: tuple
    offsets: tuple
    size: int


def record_layout(fields) -> RecordLayout:
    """fields: (dtype, width) in record order -> their RecordLayout, each field placed at the
    first offset past the previous one that is a multiple of its element size."""
    dtypes, widths, offsets, end = [], [], [], 0
    for dtype, width in fields:
        size = dtype.itemsize
        end = -(-end // size) * size
        dtypes.append(dtype)
        widths.append(int(width))
        offsets.append(end)
        end += int(width) * size
    return RecordLayout(tuple(dtypes), tuple(widths), tuple(offsets), -(-end // RECORD_ALIGN) * RECORD_ALIGN)


def pack_records(tensors, layout: RecordLayout) -> torch.Tensor:
    """tensors [..., widths[i]] (the same leading shape), each cast to dtypes[i] -> one uint8
    buffer [..., layout.size]: their bytes side by side, zeros in the padding (one torch.cat)."""
    lead = tensors[0].shape[:-1]
    pieces, end = [], 0
    for t, dtype, width, offset in zip(tensors, layout.dtypes, layout.widths, layout.offsets):
        if tuple(t.shape) != (*lead, width):
            raise ValueError(f"moe_a2a: a record field of {width} elements got {list(t.shape)}")
        if offset > end:
            pieces.append(torch.zeros(*lead, offset - end, dtype=torch.uint8, device=t.device))
        pieces.append(t.to(dtype).contiguous().view(torch.uint8))
        end = offset + width * dtype.itemsize
    if layout.size > end:
        pieces.append(torch.zeros(*lead, layout.size - end, dtype=torch.uint8, device=tensors[0].device))
    return torch.cat(pieces, dim=-1)


def unpack_records(buf: torch.Tensor, layout: RecordLayout):
    """pack_records undone: each field of buf [..., layout.size] uint8 as a view of its dtype
    [..., width] (no copy; strided: the record is its row's stride)."""
    return [
        buf[..., offset : offset + width * dtype.itemsize].view(dtype)
        for dtype, width, offset in zip(layout.dtypes, layout.widths, layout.offsets)
    ]


def wire_id_dtype(experts_in_node: int) -> torch.dtype:
    """The ids' dtype in a dispatch record: the packed ids are node-local, 0..experts_in_node - 1,
    or UNUSED (pack_rows), so int32 holds every one of them unless a node has more than 2^31 - 1
    experts; then int64, as pack_rows makes them."""
    return torch.int32 if experts_in_node <= torch.iinfo(torch.int32).max else torch.int64


def dispatch_record(x_dtype, hidden: int, topk: int, weight_dtype, experts_in_node: int, scale_blocks=None):
    """The dispatch leg's record (one per node and slot): the row (hidden elements of x_dtype, fp8
    included), with fp8 rows their scale_blocks fp32 scales, the K node-local ids (wire_id_dtype),
    the K weights (weight_dtype), in that order, each aligned to its element size, padded to
    RECORD_ALIGN bytes."""
    fields = [(x_dtype, hidden)]
    if scale_blocks is not None:
        fields.append((torch.float32, scale_blocks))
    fields += [(wire_id_dtype(experts_in_node), topk), (weight_dtype, topk)]
    return record_layout(fields)


def sum_partials(own: torch.Tensor, back: torch.Tensor, plan: RowPlan, me: int) -> torch.Tensor:
    """out[t] = the sum over nodes, in node order, of node n's partial sum of token t (own: the
    in-node combine of this rank's tokens, node `me`'s; back [N, cap, H]: what node n returned
    for the rows this rank packed for it), in fp32, cast once to own's dtype."""
    T, H = own.shape
    acc = torch.zeros(T, H, dtype=torch.float32, device=own.device)
    for n in range(back.shape[0]):
        if n == me:
            acc = acc + own.float()
            continue
        slot = plan.slot[:, n]
        part = back[n][slot.clamp(min=0)].float()
        acc = acc + torch.where((slot >= 0).unsqueeze(-1), part, torch.zeros_like(part))
    return acc.to(own.dtype)
