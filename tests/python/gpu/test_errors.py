"""What raises, on every GPU of the node: bad input, a bad expert id, a capacity overflow, a
missing peer. Each gives a clear exception on every rank (the rank with the error names it, the
others name a rank that reported one), never a hang and never a write outside the buffers, and
the AllToAll stays usable where the round itself completed (docs/reliability.md). Faults injected
into a running process (a rank that dies, stalls or corrupts) are in test_faults.py.
"""

import threading
import time

import hooks
import pytest
import torch
import torch.distributed as dist
from all_to_all_checks import (
    assert_reports_lead_to,
    edge_inputs,
    experts_for,
    fake_grouped_gemm,
    run_round,
    to_device,
)
from conftest import meet

import moe_a2a
from moe_a2a import reference as ref


def bad_variants(x, idx, w, T_max):
    return {
        "x float32": ((x.float(), idx, w), "x must be"),
        "x wrong hidden": ((x[:, :-8].contiguous(), idx, w), "x must be"),
        "x on cpu": ((x.cpu(), idx, w), "x must be a GPU tensor"),
        "too many tokens": (
            (
                x.repeat(T_max + 1, 1)[: T_max + 1],
                idx.repeat(T_max + 1, 1)[: T_max + 1],
                w.repeat(T_max + 1, 1)[: T_max + 1],
            ),
            "more than max_num_tokens",
        ),
        "idx wrong topk": ((x, idx[:, :-1].contiguous(), w), "topk_idx must be"),
        "idx float": ((x, idx.float(), w), "topk_idx must be int32 or int64"),
        "weights fp16": ((x, idx, w.half()), "topk_weights must be float32"),
        "weights wrong rows": ((x, idx, w[:-1].contiguous()), "topk_weights must be"),
    }


def test_bad_inputs_raise_and_leave_ep_usable(world, rank):
    E, K, H, T = experts_for(64, world), 6, 2048, 8
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16) as ep:
        inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=31, num_tokens=T)
        x, idx, w = to_device(inputs)[rank]
        for name, (args, message) in bad_variants(x, idx, w, T).items():
            with pytest.raises(RuntimeError, match=message):
                ep.dispatch(*args)
        run_round(ep, inputs, rank, world, E)
        d = ep.dispatch(x, idx, w)
        with pytest.raises(RuntimeError, match="expert_y must be"):
            ep.combine(d.expert_x[:, :-1], d)
        with pytest.raises(RuntimeError, match="out of order"):
            ep.dispatch(x, idx, w)
        ep.combine(fake_grouped_gemm(d, rank), d)
        ep.synchronize()


def test_config_mismatch_raises_on_every_rank(world, rank):
    with pytest.raises(RuntimeError, match="disagree"):
        moe_a2a.AllToAll(dist.group.WORLD, experts_for(64, world), 6, 2048 + 8 * rank, 8, torch.bfloat16)


def test_invalid_config_raises(world):
    with pytest.raises(ValueError, match="divisible"):
        moe_a2a.AllToAll(dist.group.WORLD, world * 4 + 1, 2, 256, 8, torch.bfloat16)
    with pytest.raises(ValueError, match="hidden_dim"):
        moe_a2a.AllToAll(dist.group.WORLD, world * 4, 2, 100, 8, torch.bfloat16)


@pytest.mark.parametrize("T", [16, 2], ids=["signalled", "flagged"])
@pytest.mark.parametrize("bad_id", [-2, "E", 2**31 - 1, 2**40], ids=["neg", "E", "int32max", "int64big"])
def test_bad_expert_id_is_caught_on_device(bad_id, T, world, rank):
    """Also at a few tokens, where combine's partial sums are flagged words and the error reaches the
    token ranks with the start signals instead of partial signals. "E": the first id past the experts."""
    E, K, H = experts_for(64, world), 6, 2048
    bad_id = E if bad_id == "E" else bad_id
    canary = moe_a2a.SymmetricHeap(dist.group.WORLD, 1 << 20)
    guard = canary.alloc((1 << 18,), torch.int32)
    guard.fill_(0x5A5A5A5A)
    try:
        with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16) as ep:
            inputs = ref.generate_all_inputs(
                world, E, K, H, T, torch.bfloat16, seed=41, num_tokens=T, index_dtype=torch.int64
            )
            x, idx, w = to_device(inputs)[rank]
            if rank == 0:
                idx = idx.clone()
                idx[T // 2, 1] = bad_id
            d = ep.dispatch(x, idx, w)
            ep.combine(fake_grouped_gemm(d, rank), d)
            with pytest.raises(RuntimeError) as raised:
                ep.synchronize()
            assert_reports_lead_to(str(raised.value), 0, "expert id", world)
            run_round(ep, inputs, rank, world, E)  # the error was reported once; the next call is clean
        torch.cuda.synchronize()
        assert bool((guard == 0x5A5A5A5A).all()), "a bad id wrote outside the all-to-all's buffers"
    finally:
        canary.close()


@pytest.mark.parametrize(
    "T, K, dispatch_dtype",
    [(16, 6, None), (2048, 6, None), (1024, 4, torch.float8_e4m3fn)],
    ids=["counting_block", "counted_wide", "fp8_reserved"],
)
def test_check_while_the_round_runs_names_the_bad_id(T, K, dispatch_dtype, world, rank):
    """check() does not wait for the kernels. Polled while a round with a bad id on rank 0 runs, the
    first error it raises on rank 0 names the id, never a peer's echo of it, and every other rank's
    leads there (protocol.md, "Errors travel in signals"). Until session 48 the counts carried the
    id's error bit before the routing had recorded it, so the peers' answers could come back first.
    The counting block's loop, its 16-byte reads (from 8192 ids) and an fp8 launch's reservation
    (from 1024 tokens) are the three ways a dispatch counts."""
    E, H = experts_for(64, world), 2048
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, dispatch_dtype=dispatch_dtype) as ep:
        inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=43, num_tokens=T)
        x, idx, w = to_device(inputs)[rank]
        if rank == 0:
            idx = idx.clone()
            idx[T - 3, 1] = E  # in the last token group
        d = ep.dispatch(x, idx, w)
        ep.combine(torch.zeros(d.expert_x.shape, dtype=torch.bfloat16, device="cuda"), d)
        deadline = time.monotonic() + 60
        first = None
        while first is None:
            try:
                ep.check()
            except RuntimeError as e:
                first = str(e)
            assert time.monotonic() < deadline, "no error raised within 60 s"
        torch.cuda.current_stream().synchronize()
        assert_reports_lead_to(first, 0, "expert id", world)


def test_check_waits_for_an_own_error_being_written(world, rank):
    """A claim without a code is an own error still being written: a second own error of the call,
    which lost the claim, may mark the round at once, and a peer's answer to that mark come back
    before the first error's code (protocol.md, "Errors travel in signals"). check() waits for the
    code and raises the own error, not the peer's report; a claim whose code never comes is given
    up after about a second, and the peer's report raised. The test writes the record as the
    kernels would, on each rank by itself."""
    E, K, H, T = experts_for(8, world), 2, 256, 8
    peer = (rank + 1) % world
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16) as ep:
        record = hooks.error_record(ep)

        def write_own_error_late():
            time.sleep(0.2)
            record.detail, record.index, record.expected = -2, 3, E
            record.code = hooks.BAD_EXPERT_ID  # last, as report_error publishes it

        record.claimed, record.peer_report = 1, peer + 1
        writer = threading.Thread(target=write_own_error_late)
        writer.start()
        try:
            with pytest.raises(RuntimeError, match=f"rank {rank}: topk_idx holds expert id -2 at token 3"):
                ep.check()
        finally:
            writer.join()

        record.claimed, record.peer_report = 1, peer + 1  # and no code ever
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=f"rank {peer} reported an error"):
            ep.check()
        assert 0.9 < time.monotonic() - start < 10, "the wait for a code that never comes is not about a second"
        ep.check()  # raised once, then cleared
        inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=44, num_tokens=T)
        run_round(ep, inputs, rank, world, E)


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_capacity_overflow_raises_everywhere(layout, world, rank):
    E, K, H, T = 8 * world, 2, 512, 32
    # Small enough that "every token to experts 0, 1" overflows, large enough for one token per rank.
    limit = world if layout == "padded" else 2 * world
    cap = {"max_recv_tokens_per_expert": limit} if layout == "padded" else {"max_recv_tokens": limit}
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, layout=layout, **cap) as ep:
        inputs = edge_inputs("one_expert", world, E, K, H, T, torch.bfloat16)
        x, idx, w = to_device(inputs)[rank]
        d = ep.dispatch(x, idx, w)
        ep.combine(fake_grouped_gemm(d, rank), d)
        with pytest.raises(RuntimeError, match="capacity|max_recv_tokens|reported an error"):
            ep.synchronize()
        if layout == "padded":
            assert int(d.expert_num_tokens.max()) <= limit
        else:
            assert int(d.expert_offsets[-1]) <= limit and int(d.expert_num_tokens.sum()) <= limit
        run_round(
            ep, ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=62, num_tokens=1), rank, world, E
        )  # reported once; a round that fits is clean


def test_missing_peer_times_out(world, rank):
    """Rank 0 dispatches, nobody else does: rank 0 must give up after its timeout and name a
    rank it waited for; the others were never blocked."""
    E, K, H, T = experts_for(64, world), 6, 2048, 8
    ep = moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, timeout_s=1.0)
    try:
        if rank == 0:
            inputs = to_device(ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=51, num_tokens=T))
            ep.dispatch(*inputs[0])
            with pytest.raises(RuntimeError, match=r"timed out in dispatch-recv waiting for rank [1-9]"):
                ep.synchronize()
            with pytest.raises(RuntimeError, match="unusable"):
                ep.dispatch(*inputs[0])
    finally:
        ep.close()


def test_missing_peer_in_flagged_combine_times_out(world, rank):
    """Every rank dispatches one token and only rank 0 combines: its combine waits for rank 1's
    flagged partial sums (a token rank with at most FLAGGED_TOKENS tokens polls the words
    themselves) and for rank 1's combine start signal, and must give up after its timeout and
    name rank 1, never spin on. Both waits run at once in one block and have the same timeout,
    so either may be the first to report (on two H100s the start signal's often was; on one GPU
    time-sliced, the sums'): the error names the call, the rank and what it waited for."""
    E, K, H, T = 8 * world, 6, 2048, 1
    ep = moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, timeout_s=1.0)
    try:
        x, idx, w = to_device(ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=52, num_tokens=T))[rank]
        if rank == 0:  # the token goes to rank 1's experts only, so rank 0's combine polls rank 1's words
            idx = torch.arange(E // world, E // world + K, device=idx.device, dtype=idx.dtype).view(1, K)
        d = ep.dispatch(x, idx, w)
        ep.synchronize()
        meet()
        try:
            if rank == 0:
                ep.combine(fake_grouped_gemm(d, rank), d)
                with pytest.raises(
                    RuntimeError,
                    match=r"timed out in combine-recv waiting for rank 1's (partial sums|combine start).*did not take "
                    r"part in the call",
                ):
                    ep.synchronize()
        finally:
            meet()  # also when rank 0's check failed: no rank is left waiting for it
    finally:
        ep.close()
