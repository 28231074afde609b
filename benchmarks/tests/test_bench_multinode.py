"""bench_multinode.py: its arguments, the bytes it reports against what pack sends, the load split.

CPU only (no GPU, no second rank): python -m pytest benchmarks/tests
"""

import common
import pytest
import torch


def test_bench_multinode_cli():
    """bench_multinode.py: DeepSeek-V3 at 1..4096 tokens then the challenge shapes; --counts as
    bench_graph's; --inputs >= 8 and --node-capacity >= 1."""
    import bench_multinode as bm

    a = bm.parse_args([])
    assert [s.label for s in a.shape_list[:4]] == [f"E256-K8-H7168-T{t}" for t in (1, 128, 1024, 4096)]
    assert [s.label for s in a.shape_list[4:]] == [s.label for s in common.parse_shapes(common.CHALLENGE_SHAPES)]
    assert a.count_list == [["max"]] * 9 and a.fp8 is None and a.node_capacity is None
    a = bm.parse_args(
        ["--shapes", "8,2,64,16", "--counts", "max;drawn;0/16", "--fp8", "e4m3fn", "--node-capacity", "4"]
    )
    assert a.count_list == [["max", "drawn", "0/16"]] and a.fp8 == "e4m3fn" and a.node_capacity == 4
    for bad in (["--inputs", "4"], ["--node-capacity", "0"], ["--shapes", "8,2,64,16", "--counts", "1/17"]):
        with pytest.raises(SystemExit):
            bm.parse_args(bad)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_bench_multinode_byte_formula_is_what_pack_sends(fp8):
    """The dispatch leg's bytes per rank pair (the formula the report states) are cap records of
    the layout the leg packs MultiNodeAllToAll's step 1 into, whatever the routing, and the byte
    buffer it sends is N of them; the combine leg's are cap partial rows of the token dtype. Hidden
    2880: the last fp8 scale block short."""
    import bench_multinode as bm

    from moe_a2a import reference as ref
    from moe_a2a.multinode import dispatch_leg_record, pack_sends
    from moe_a2a.node_legs import pack_records

    shape, cap, nodes = common.Shape(16, 4, 2880, 8), 6, 4
    for tokens in (0, 3, 8):
        x, idx, w = ref.generate_rank_inputs(1, nodes, 16, 4, 2880, 8, torch.bfloat16, seed=1, num_tokens=tokens)
        scale = None
        if fp8:
            x, scale = ref.quantize_fp8(x, torch.float8_e4m3fn)
        _, sent = pack_sends(x, idx, w, scale, 16, nodes, cap, me=1)
        d_pair, c_pair = bm.leg_pair_bytes(shape, cap, fp8)
        record = dispatch_leg_record(sent, 16, nodes)
        assert cap * record.size == d_pair and record.size % 16 == 0
        fields = (sent[0], *sent[3:], sent[1], sent[2])  # the record's order: row, fp8 scales, ids, weights
        assert pack_records(fields, record).shape == (nodes, cap, record.size)
        assert all(t.shape[:2] == (nodes, cap) for t in sent)
    assert c_pair == cap * 2880 * 2
    # bf16: 5760 row bytes + 4 x (4 + 4); fp8: 2880 + 23 x 4 scales + 32 = 3004, padded to 3008
    assert bm.dispatch_row_bytes(shape, fp8) == (3008 if fp8 else 5792)
    assert bm.dispatch_row_bytes(common.Shape(256, 8, 7168, 1), fp8) == (7168 + 56 * 4 + 64 if fp8 else 14336 + 64)
    # hidden 7: bf16 14 row bytes -> 16, fp8 7 -> 8 + 4 scale bytes; + 16 of ids and weights, padded to 32
    assert bm.dispatch_row_bytes(common.Shape(8, 2, 7, 1), fp8) == 32


def test_bench_multinode_load_splits():
    """Rank me sends counts[me][n] rows to node n and receives counts[n][me] from it."""
    import bench_multinode as bm

    counts = [[0, 3, 1], [2, 0, 0], [5, 4, 0]]
    assert bm.load_splits(counts, 1, 10) == ([20, 0, 0], [30, 0, 40])
    assert bm.load_splits(counts, 0, 1) == ([0, 3, 1], [0, 2, 5])
