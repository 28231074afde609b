"""The multi-node legs (moe_a2a.node_legs) as an executable spec, without a GPU: every rank of
N nodes x G ranks in one process, the network legs as list transpositions over each rail, the
in-node exchange and its experts as the reference's arithmetic (the fake GEMM: x * (1 + the
global rank that owns the expert)). The result must be the one-node reference's, up to the
extra rounding the design adds (each node's partial sum is cast once before the nodes' sums)."""

import pytest
import torch

from moe_a2a import reference as ref
from moe_a2a.node_legs import (
    RECORD_ALIGN,
    UNUSED,
    as_bytes,
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
    wire_id_dtype,
)
from moe_a2a.nodes import NodeLayout


def in_node_moe(x, ids, w, node, experts_in_node, ranks_per_node):
    """dispatch -> fake GEMM -> combine inside node `node`, for one rank's in-node tokens, with
    the reference's roundings: each (token, k) output cast to the token dtype, the weighted sum
    in fp32, k ascending, cast once."""
    owner = node * ranks_per_node + ids.clamp(min=0) // (experts_in_node // ranks_per_node)
    factor = (1 + owner).float()
    used = ids != UNUSED
    acc = torch.zeros(x.shape, dtype=torch.float32)
    for k in range(ids.shape[1]):
        y = (x.float() * factor[:, k : k + 1]).to(x.dtype)
        acc = torch.where(used[:, k : k + 1], acc + w[:, k : k + 1].float() * y.float(), acc)
    return acc.to(x.dtype)


def two_leg_moe(inputs, layout, num_experts, cap):
    """Every rank's output of the two-leg dispatch -> fake GEMM -> combine, and the overflow flags."""
    N, G, world = layout.num_nodes, layout.ranks_per_node, layout.world
    E_node = experts_per_node(num_experts, N)
    plans = [plan_rows(inputs[r][1], num_experts, N, cap, layout.node_of(r)) for r in range(world)]
    sent = [pack_rows(*inputs[r], plans[r], num_experts, N) for r in range(world)]
    outs = []
    in_node = {}
    for r in range(world):  # network leg 1: rank r gets, from each node n, what its rail peer there packed for r's node
        me, g = layout.node_of(r), layout.rail_of(r)
        peers = [layout.rank_of(n, g) for n in range(N)]
        recv = [torch.stack([sent[p][i][me] for p in peers]) for i in range(3)]
        x_in, ids_in, w_in = in_node_tokens(*inputs[r], me, *recv, num_experts, N)
        in_node[r] = in_node_moe(x_in, ids_in, w_in, me, E_node, G)
    returned = {r: in_node[r][inputs[r][0].shape[0] :].view(N, cap, -1) for r in range(world)}  # by source node
    for r in range(world):  # network leg 2: node n's partials of the rows r packed for it come back on the rail
        me, g = layout.node_of(r), layout.rail_of(r)
        back = torch.stack([returned[layout.rank_of(n, g)][me] for n in range(N)])
        outs.append(sum_partials(in_node[r][: inputs[r][0].shape[0]], back, plans[r], me))
    return outs, [bool(p.overflow) for p in plans]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("nodes,per_node,E,K", [(2, 1, 8, 2), (2, 2, 16, 4), (4, 2, 64, 8), (3, 2, 24, 6)])
def test_two_legs_give_the_one_node_result(nodes, per_node, E, K, dtype):
    layout = NodeLayout(nodes, per_node)
    H, T = 64, 12
    inputs = ref.generate_all_inputs(layout.world, E, K, H, T, dtype, seed=5)
    outs, overflow = two_leg_moe(inputs, layout, E, cap=T)  # cap = T: no routing overflows
    assert not any(overflow)
    for r in range(layout.world):
        want = ref.moe_reference(inputs, r, E, layout.world)
        if dtype == torch.float32:  # only the grouping of the fp32 sum by node differs
            torch.testing.assert_close(outs[r], want, rtol=1e-6, atol=1e-6)
        else:  # and each node's partial is rounded to bf16 once
            err = ((outs[r].float() - want.float()).norm() / want.float().norm()).item()
            assert err < 1e-2, f"rank {r}: relative error {err:.3g}"


def test_one_node_is_the_in_node_exchange_exactly():
    layout = NodeLayout(1, 2)
    inputs = ref.generate_all_inputs(2, 8, 2, 32, 6, torch.bfloat16, seed=6)
    outs, _ = two_leg_moe(inputs, layout, 8, cap=6)
    for r in range(2):
        assert torch.equal(outs[r], ref.moe_reference(inputs, r, 8, 2))


def test_rows_per_node_and_slots_follow_the_tokens():
    # 2 nodes of experts 0-3 and 4-7; this rank is on node 0
    idx = torch.tensor([[0, 5], [1, 2], [6, 7], [UNUSED, 4], [3, UNUSED]])
    plan = plan_rows(idx, 8, 2, node_capacity=4, me=0)
    assert plan.count.tolist() == [0, 3]  # nothing for its own node
    assert plan.token[1].tolist() == [0, 2, 3, -1]
    assert plan.slot[:, 1].tolist() == [0, -1, 1, 2, -1]
    assert not bool(plan.overflow)
    x = torch.arange(5.0).unsqueeze(1).expand(5, 4)
    send_x, send_ids, send_w = pack_rows(x, idx, torch.ones(5, 2), plan, 8, 2)
    assert send_x[1, :, 0].tolist() == [0.0, 2.0, 3.0, 0.0]
    assert send_ids[1].tolist() == [[UNUSED, 1], [2, 3], [UNUSED, 0], [UNUSED, UNUSED]]  # node-local ids
    assert (send_ids[0] == UNUSED).all() and send_w[1, 3].tolist() == [0.0, 0.0]


def test_more_rows_than_the_capacity_raise_the_overflow_flag():
    idx = torch.tensor([[4], [5], [6]])  # three tokens for node 1, capacity 2
    plan = plan_rows(idx, 8, 2, node_capacity=2, me=0)
    assert bool(plan.overflow) and plan.count.tolist() == [0, 2] and plan.token[1].tolist() == [0, 1]
    assert plan.slot[:, 1].tolist() == [0, 1, -1]  # the dropped row has no slot: nothing written past the buffer


def test_unequal_counts_and_unused_slots():
    """Ranks with 0, 1, 5 and 12 tokens, and every third token's first slot unused."""
    layout = NodeLayout(2, 2)
    E, K, H = 16, 4, 32
    inputs = ref.generate_all_inputs(4, E, K, H, 12, torch.float32, seed=7, num_tokens=[0, 12, 5, 1])
    for x, idx, w in inputs:
        idx[::3, 0] = UNUSED
    outs, overflow = two_leg_moe(inputs, layout, E, cap=12)
    assert not any(overflow)
    for r in range(4):
        assert outs[r].shape == inputs[r][0].shape
        torch.testing.assert_close(outs[r], ref.moe_reference(inputs, r, E, 4), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_local_exchange_is_the_one_rank_all_to_all(dtype):
    """LocalExchange (the in-node exchange of a node of one rank) at world 1: bitwise the
    reference's dispatch -> fake GEMM -> combine, packed rows grouped by expert, unused slots
    and 0 tokens included."""
    from moe_a2a.local_exchange import LocalExchange

    for T in (0, 9):
        inputs = ref.generate_all_inputs(1, 8, 3, 16, 9, dtype, seed=8, num_tokens=T)
        x, idx, w = inputs[0]
        idx[::2, 1] = UNUSED
        ex = LocalExchange(8, 3, 16, 9, dtype)
        d = ex.dispatch(x, idx, w)
        counts = torch.bincount(idx[idx != UNUSED].long(), minlength=8)
        assert d.expert_num_tokens.tolist() == counts.tolist()
        for e in range(8):  # each expert's rows are its (token, k) pairs, in token order
            rows = d.expert_x[d.expert_offsets[e] : d.expert_offsets[e + 1]]
            assert torch.equal(rows, x[(idx == e).nonzero()[:, 0]])
        out = ex.combine(d.expert_x, d)  # the fake GEMM at rank 0: y = x * 1
        assert torch.equal(out, ref.moe_reference(inputs, 0, 8, 1))


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("hidden", [7, 64, 2880])
def test_dispatch_records_hold_every_field_aligned(hidden, fp8):
    """One byte record per (node, slot): row (fp8: its bytes, then fp32 scales), int32 ids, fp32
    weights, each at an offset that is a multiple of its element size, the record a multiple of
    16 bytes with zeros in the padding; unpacked, every field is a view of its dtype holding the
    packed values bitwise (masked slots' -1 included), and in_node_tokens gets from it exactly the
    tensors it gets from pack_rows' own."""
    idx = torch.tensor([[0, 5, 9], [1, 2, UNUSED], [6, 7, 15], [UNUSED, 4, 12], [3, UNUSED, UNUSED]])
    T, K, N, cap, E = 5, 3, 4, 3, 16
    x = torch.randn(T, hidden, dtype=torch.bfloat16)
    scale = None
    if fp8:
        x, scale = ref.quantize_fp8(x, torch.float8_e4m3fn)
    w = torch.rand(T, K)
    plan = plan_rows(idx, E, N, cap, me=1)
    sent = pack_rows(x, idx, w, plan, E, N)
    layout = dispatch_record(
        x.dtype, hidden, K, w.dtype, experts_per_node(E, N), None if scale is None else 1 + (hidden - 1) // 128
    )
    assert wire_id_dtype(experts_per_node(E, N)) == torch.int32 and wire_id_dtype(2**31) == torch.int64
    fields = [sent[0]] + ([] if scale is None else [gather_slots(scale, plan)]) + [sent[1], sent[2]]
    row = hidden * x.element_size()
    scales = 4 * (1 + (hidden - 1) // 128) if fp8 else 0
    start = -(-row // 4) * 4  # the 4-byte fields after the row
    assert layout.offsets == ((0, start, start + scales, start + scales + 4 * K) if fp8 else (0, start, start + 4 * K))
    assert layout.size == -(-(start + scales + 8 * K) // 16) * 16 and layout.size % RECORD_ALIGN == 0
    assert all(o % d.itemsize == 0 for o, d in zip(layout.offsets, layout.dtypes))
    buf = pack_records(fields, layout)
    assert buf.dtype == torch.uint8 and buf.shape == (N, cap, layout.size)
    used = torch.zeros(layout.size, dtype=torch.bool)
    for o, d, width in zip(layout.offsets, layout.dtypes, layout.widths):
        used[o : o + width * d.itemsize] = True
    assert (buf[..., ~used] == 0).all()  # the padding
    back = unpack_records(buf, layout)
    for got, want, d in zip(back, fields, layout.dtypes):
        assert got.dtype == d and got.shape == want.shape and got.untyped_storage().data_ptr() == buf.data_ptr()
        assert torch.equal(as_bytes(got), as_bytes(want.to(d)))
    recv = (back[0], back[-2], back[-1])
    for a, b in zip(in_node_tokens(x, idx, w, 1, *recv, E, N), in_node_tokens(x, idx, w, 1, *sent, E, N)):
        assert a.dtype == b.dtype and torch.equal(as_bytes(a), as_bytes(b))


def test_a_record_layout_places_each_field_at_its_element_size():
    layout = record_layout([(torch.uint8, 3), (torch.int64, 1), (torch.bfloat16, 3), (torch.float32, 1)])
    assert layout.offsets == (0, 8, 16, 24) and layout.size == 32
    assert record_layout([(torch.float32, 4)]).size == 16 and record_layout([]).size == 0
