"""Speed-of-light byte counts and times on hand-computed examples, and the vectorised
count against its loop spelling and against the reference dispatch. CPU only."""

import pytest
import torch

from moe_a2a import reference as ref
from moe_a2a import sol


def idx(rows, dtype=torch.int32, topk=2):
    return torch.tensor(rows, dtype=dtype).reshape(-1, topk)


def test_bytes_hand_example_world2():
    # 4 experts, rank 0 owns {0, 1}, rank 1 owns {2, 3}; 4 halves per token = 8 bytes.
    routing = [
        idx(
            [
                [0, 1],  # both local: crosses nothing
                [0, 2],  # to rank 1
                [2, 3],
            ]
        ),  # two experts on rank 1: sent there once
        idx(
            [
                [0, 3],  # to rank 0
                [2, 3],
            ]
        ),  # local
    ]
    assert sol.traffic_matrix(routing, 4, 2).tolist() == [[0, 2], [1, 0]]
    dispatch, combine = sol.phase_bytes(routing, 4, 2, hidden=4, elem_bytes=2)
    assert dispatch.matrix == [[0, 16], [8, 0]]
    assert dispatch.bytes_out == [16, 8]
    assert dispatch.bytes_in == [8, 16]
    assert combine.matrix == [[0, 8], [16, 0]]
    assert combine.bytes_out == [8, 16]
    assert combine.bytes_in == [16, 8]
    assert dispatch.total == combine.total == 24


def test_bytes_hand_example_world3_with_empty_rank():
    # 3 experts, one per rank; hidden 2 bf16 = 4 bytes per token; rank 2 has no tokens.
    routing = [
        idx(
            [
                [1, 2],  # to ranks 1 and 2
                [0, 1],
            ],
            dtype=torch.int64,
        ),  # to rank 1
        idx([[1, 0]], dtype=torch.int64),  # to rank 0
        torch.zeros(0, 2, dtype=torch.int64),
    ]
    dispatch, combine = sol.phase_bytes(routing, 3, 3, hidden=2, elem_bytes=torch.bfloat16)
    assert dispatch.matrix == [[0, 8, 4], [4, 0, 0], [0, 0, 0]]
    assert dispatch.bytes_out == [12, 4, 0]
    assert dispatch.bytes_in == [4, 8, 4]
    assert combine.bytes_out == [4, 8, 4]
    assert combine.bytes_in == [12, 4, 0]
    # busiest: rank 0 sends 12 bytes in dispatch and receives them in combine
    assert dispatch.busiest == combine.busiest == 12
    assert sol.PhaseBytes.from_matrix([]).busiest == 0


def test_sol_time_formula():
    # rank 0: 1e6 B out at 100 GB/s = 10 us; rank 1: 2e6 B in at 50 GB/s = 40 us.
    t = sol.sol_time_us([1e6, 0], [0, 2e6], bw_out_GBps=100, bw_in_GBps=50, latency_us=1.5)
    assert t == pytest.approx(41.5)
    # The out side can be the bound too.
    t = sol.sol_time_us([3e6, 0], [0, 1e6], bw_out_GBps=100, bw_in_GBps=50, latency_us=0)
    assert t == pytest.approx(30.0)
    # Nothing to move costs the latency only.
    assert sol.sol_time_us([0, 0], [0, 0], 100, 100, 2.0) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        sol.sol_time_us([1], [1], 0, 100, 0)
    with pytest.raises(ValueError):
        sol.sol_time_us([1, 2], [1], 100, 100, 0)


def test_speed_of_light_summary():
    routing = [idx([[0, 1], [0, 2], [2, 3]]), idx([[0, 3], [2, 3]])]
    # hidden 1000 fp16: 2000 bytes per token; dispatch out = [4000, 2000], in = [2000, 4000].
    s = sol.speed_of_light(routing, 4, 2, hidden=1000, elem_bytes=2, bw_out_GBps=2.0, bw_in_GBps=4.0, latency_us=1.0)
    # dispatch: max(4000/2e3, 2000/4e3, 2000/2e3, 4000/4e3) = 2 us, + 1
    assert s.dispatch_us == pytest.approx(3.0)
    # combine: out = [2000, 4000], in = [4000, 2000] -> max(1, 1, 2, 0.5) = 2 us, + 1
    assert s.combine_us == pytest.approx(3.0)
    assert s.total_us == pytest.approx(6.0)
    assert s.total_bytes == 12000
    d = s.to_dict()
    assert d["total_us"] == pytest.approx(6.0)
    assert d["dispatch"]["bytes_out"] == [4000, 2000]
    assert "max" in s.formula
    # bw_in defaults to bw_out
    s2 = sol.speed_of_light(routing, 4, 2, 1000, 2, bw_out_GBps=2.0)
    assert s2.dispatch_us == pytest.approx(2.0)


@pytest.mark.parametrize(
    "world,E,K,nt,idt",
    [
        (2, 8, 2, None, torch.int32),
        (4, 16, 1, [3, 0, 5, 8], torch.int64),
        (8, 64, 6, None, torch.int32),
        (8, 256, 8, [0, 16, 1, 2, 3, 4, 5, 6], torch.int64),
    ],
)
def test_traffic_matches_loop_and_reference_dispatch(world, E, K, nt, idt):
    inputs = ref.generate_all_inputs(world, E, K, 8, 16, seed=11, num_tokens=nt, index_dtype=idt)
    vec = sol.traffic_matrix(inputs, E, world)  # Routing tuples are accepted too
    assert torch.equal(vec, sol.traffic_matrix_loop([i.topk_idx for i in inputs], E, world))
    assert torch.equal(vec, sol.traffic_matrix([i.topk_idx.to(torch.int32) for i in inputs], E, world))
    # Cross-check: the tokens rank s must send to d are the distinct (s, token) pairs that
    # the reference dispatch delivers on d.
    for d in range(world):
        got = ref.dispatch_reference(inputs, d, E, world)
        pairs = torch.cat([m[:, 1:3] for m in got.meta])
        for s in range(world):
            distinct = torch.unique(pairs[pairs[:, 0] == s], dim=0).shape[0]
            assert int(vec[s, d]) == (0 if s == d else distinct), (s, d)


def test_single_rank_moves_nothing():
    inputs = ref.generate_all_inputs(1, 4, 2, 8, 16, seed=2)
    s = sol.speed_of_light(inputs, 4, 1, 8, 2, bw_out_GBps=100, latency_us=1.25)
    assert s.total_bytes == 0
    assert s.dispatch_us == pytest.approx(1.25) and s.combine_us == pytest.approx(1.25)


def test_rejects_bad_routing():
    with pytest.raises(ValueError):
        sol.traffic_matrix([idx([[0, 4]])], 4, 1)  # expert 4 does not exist
    with pytest.raises(ValueError):
        sol.traffic_matrix([idx([[0, 1]])], 4, 2)  # routing of one rank for world 2


# world 2, 4 experts (2 per rank). rank 0: [0, 1] stays home; [0, 2] goes to both ranks.
# rank 1: [3, 2] stays home; [1, 3] and [2, 0] go to both ranks.
LOCAL_ROUTING = [torch.tensor([[0, 1], [0, 2]]), torch.tensor([[3, 2], [1, 3], [2, 0]])]


def test_local_bytes_closed_form():
    # hidden 4, 2-byte elements: 8 bytes a row.
    # rows received (token, distinct rank, own tokens included): r0: 2 + 2 = 4, r1: 1 + 3 = 4
    # rows sent (own token, distinct destination, itself included): r0: 3, r1: 5
    # (token, k) pairs on the rank: r0: 3 + 2 = 5, r1: 1 + 4 = 5; own tokens: 2 and 3
    local = sol.local_bytes(LOCAL_ROUTING, 4, 2, 4, 2)
    assert local.dispatch == [(4 + 5) * 8, (4 + 5) * 8]  # read received + write pairs
    assert local.combine == [(5 + 4 + 3 + 2) * 8, (5 + 4 + 5 + 3) * 8]  # pairs + partials out/in + outputs
    assert sol.pairs_matrix(LOCAL_ROUTING, 4, 2).tolist() == [[0, 1], [2, 0]]


def test_local_bytes_single_rank_and_empty_rank():
    # world 1: every pair is local; dispatch reads each token once and writes K rows.
    idx = torch.tensor([[0, 1], [1, 2], [3, 0]])
    local = sol.local_bytes([idx], 4, 1, hidden=1, elem_bytes=1)
    assert local.dispatch == [3 + 6] and local.combine == [6 + 3 + 3 + 3]
    # world 3, one expert per rank, rank 2 has no tokens but receives one row
    routing = [torch.tensor([[0, 2]]), torch.tensor([[1, 1]]), torch.zeros(0, 2, dtype=torch.int64)]
    local = sol.local_bytes(routing, 3, 3, hidden=1, elem_bytes=1)
    assert local.dispatch == [1 + 1, 1 + 2, 1 + 1]
    assert local.combine == [1 + 1 + 2 + 1, 2 + 1 + 1 + 1, 1 + 1 + 0 + 0]


def test_phase_bound_takes_the_larger_term():
    # link: 1e6 bytes at 100 GB/s = 10 us; local: 8e6 bytes at 1000 GB/s = 8 us
    us, bound = sol.phase_bound_us([1e6, 0], [0, 1e6], [8e6, 0], 100.0, 1000.0, 2.0)
    assert bound == "link" and us == pytest.approx(12.0)
    us, bound = sol.phase_bound_us([1e6, 0], [0, 1e6], [8e6, 3e7], 100.0, 1000.0, 2.0)
    assert bound == "local" and us == pytest.approx(32.0)
    us, bound = sol.phase_bound_us([0, 0], [0, 0], [0, 0], 100.0, 1000.0, 2.0)
    assert bound == "latency" and us == pytest.approx(2.0)
    with pytest.raises(ValueError):
        sol.phase_bound_us([1], [1], [1], 100.0, 0.0, 0.0)


def test_bounds_per_phase():
    # hidden 1000 fp16: 2000 bytes a row. Link: dispatch out [2000, 4000], in [4000, 2000] and
    # combine the reverse: 4000 bytes at 2 GB/s = 2 us either phase.
    # Local: dispatch 9 rows on each rank = 18000 bytes; combine max 17 rows = 34000 bytes.
    d, c = sol.bounds(LOCAL_ROUTING, 4, 2, 1000, torch.float16, bw_GBps=2.0, hbm_GBps=10.0, latency_us=1.0)
    assert (d.link_bytes, d.local_bytes, c.link_bytes, c.local_bytes) == (4000, 18000, 4000, 34000)
    assert d.link_us == pytest.approx(2.0) and d.local_us == pytest.approx(1.8)
    assert d.bound == "link" and d.us == pytest.approx(3.0)
    assert c.bound == "local" and c.local_us == pytest.approx(3.4) and c.us == pytest.approx(4.4)
    d, c = sol.bounds(LOCAL_ROUTING, 4, 2, 1000, 2, bw_GBps=2.0, hbm_GBps=5.0, latency_us=0.0)
    assert d.bound == "local" and d.us == pytest.approx(3.6)
    assert c.bound == "local" and c.us == pytest.approx(6.8)


def test_fp8_dispatch_rows():
    # hidden 1000: an fp8 row is 1000 bytes and ceil(1000 / 128) = 8 scales of 4 bytes: 1032 bytes.
    # Dispatch moves (and its receivers expand) fp8 rows, combine still fp16 rows of 2000 bytes.
    assert sol.fp8_row_bytes(1000) == 1032 and sol.fp8_row_bytes(7168) == 7168 + 4 * 56
    fp8 = torch.float8_e4m3fn
    dispatch, combine = sol.phase_bytes(LOCAL_ROUTING, 4, 2, 1000, torch.float16, fp8)
    token_dispatch, token_combine = sol.phase_bytes(LOCAL_ROUTING, 4, 2, 1000, torch.float16)
    assert dispatch.matrix == [[v // 2000 * 1032 for v in row] for row in token_dispatch.matrix]
    assert combine.matrix == token_combine.matrix
    local = sol.local_bytes(LOCAL_ROUTING, 4, 2, 1000, torch.float16, torch.float8_e4m3fnuz)
    assert (
        local.dispatch == [9 * 1032, 9 * 1032]
        and local.combine == sol.local_bytes(LOCAL_ROUTING, 4, 2, 1000, 2).combine
    )
    d, c = sol.bounds(LOCAL_ROUTING, 4, 2, 1000, torch.float16, 2.0, 10.0, 1.0, dispatch_dtype=fp8)
    assert (d.link_bytes, d.local_bytes, c.link_bytes, c.local_bytes) == (2 * 1032, 9 * 1032, 4000, 34000)
    assert d.us == pytest.approx(1.0 + 2 * 1032 / 2e3)  # link-bound: 2064 bytes at 2 GB/s
    s = sol.speed_of_light(LOCAL_ROUTING, 4, 2, 1000, 2, bw_out_GBps=2.0, dispatch_dtype=fp8)
    assert s.dispatch.total == dispatch.total and s.combine.total == combine.total
    with pytest.raises(ValueError, match="dispatch_dtype"):
        sol.phase_bytes(LOCAL_ROUTING, 4, 2, 1000, 2, torch.bfloat16)
