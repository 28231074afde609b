"""Nothing is overwritten too early (docs/design/protocol.md): a rank that has nothing to do in a
round still may not start its next round before every peer has read what it sent in this one.

Each case runs two rounds. Rank 0 is the rank with nothing to do in round 1; every other rank
sends round 1 with dispatch_send and receives it with dispatch_recv HOLD_S later, while rank 0
runs on into round 2. A rank that skips the wait rewrites in round 2 the counts and rows its
peers have not read yet (their count wait accepts a later epoch), and they place round 2's rows
as round 1's: the checks against the reference fail, or a wait times out.

The backward of dispatch has no dispatch before its writes: right after a forward round it waits
for every rank's start signal, held back the same way (the last test).
"""

import time

import pytest
import torch
import torch.distributed as dist
from all_to_all_checks import check_dispatch, fake_grouped_gemm, to_device
from conftest import meet

import moe_a2a
from moe_a2a import reference as ref
from moe_a2a._rounds import _dispatch_backward_round

HOLD_S = 0.5  # far longer than rank 0's two rounds take; well inside the timeout


def round_inputs(case, world, E, K, H, T, dtype, seed, first):
    """Every rank's inputs of one round; in round 1 (`first`) rank 0 has nothing to do as `case` says."""
    zero_tokens = case == "zero_tokens" and first
    counts = [0 if (r == 0 and zero_tokens) else T - r for r in range(world)]
    inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=seed, num_tokens=counts)
    if case == "nothing_routed_here" and first:
        # Every token's K distinct experts drawn among those of ranks 1.., so no row reaches rank 0.
        local, g = E // world, torch.Generator().manual_seed(seed)
        away = [torch.randperm(E - local, generator=g)[:K] + local for _ in range(world * T)]
        inputs = [
            ref.Routing(x, torch.stack(away[r * T : r * T + len(x)]).to(idx.dtype).view(len(x), K), w)
            for r, (x, idx, w) in enumerate(inputs)
        ]
    if case == "all_slots_masked" and first:
        x, idx, w = inputs[0]
        inputs[0] = ref.Routing(x, torch.full_like(idx, ref.MASKED_SLOT), w)
    return inputs


def check_round(d, out, inputs, rank, world, E):
    check_dispatch(d, inputs, rank, world, E)
    want = ref.moe_reference(inputs, rank, E, world)
    assert out.shape == want.shape
    torch.testing.assert_close(out.cpu().float(), want.float(), rtol=1e-2, atol=5e-3)


@pytest.mark.parametrize("case", ["zero_tokens", "all_slots_masked", "nothing_routed_here"])
def test_idle_rank_waits_for_every_peer_before_its_next_round(case, world, rank):
    """zero_tokens: rank 0 holds no tokens in round 1 (no combine units: it waits for every peer's
    start signal instead). all_slots_masked: its tokens all have every slot -1. nothing_routed_here:
    no rank routes a token to rank 0's experts."""
    E, K, H, T, dtype = 8 * world, 4, 1024, 16, torch.bfloat16
    rounds = [round_inputs(case, world, E, K, H, T, dtype, seed=90 + i, first=i == 0) for i in range(2)]
    ep = moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, timeout_s=10.0)
    try:
        for i, inputs in enumerate(rounds):
            x, idx, w = to_device(inputs)[rank]
            if rank != 0 and i == 0:
                pending = ep.dispatch_send(x, idx, w)
                torch.cuda.synchronize()  # round 1 is on its way to rank 0, which now runs ahead
                time.sleep(HOLD_S)
                d = ep.dispatch_recv(pending)
            else:
                d = ep.dispatch(x, idx, w)
            out = ep.combine(fake_grouped_gemm(d, rank), d)
            ep.synchronize()
            check_round(d, out, inputs, rank, world, E)
    finally:
        try:
            meet()
        finally:
            ep.close()


@pytest.mark.parametrize("T", [16, 64])  # flagged partial sums (comb_flagged), then comb_x
def test_backward_of_dispatch_after_a_forward_round_waits_for_every_peer(T, world, rank):
    """A backward of dispatch writes the peers' comb_x (or comb_flagged), which their last combine
    reads. Right after a backward of combine that read is over (the engine skips the wait); right
    after a forward round it may not be: every rank but 0 receives its combine HOLD_S after sending
    it, while rank 0 goes on into a backward of dispatch at once. Had rank 0 not waited for every
    rank's start signal, it would overwrite what they have not summed yet: their outputs would
    not match the reference, or their wait for round 1's flagged words would time out."""
    E, K, H, dtype = 8 * world, 4, 1024, torch.bfloat16
    inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=97, num_tokens=[T - r for r in range(world)])
    ep = moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, timeout_s=10.0)
    try:
        x, idx, w = to_device(inputs)[rank]
        d = ep.dispatch(x, idx, w)
        y = fake_grouped_gemm(d, rank)
        if rank != 0:
            pending = ep.combine_send(y, d)
            torch.cuda.synchronize()  # the partial sums are on their way; rank 0 now runs ahead
            time.sleep(HOLD_S)
            out = ep.combine_recv(pending)
        else:
            out = ep.combine(y, d)
        grad_x, _ = _dispatch_backward_round(ep._engine, d.expert_x, d._route)  # every row's gradient: its x
        ep.synchronize()
        check_round(d, out, inputs, rank, world, E)
        used = (idx >= 0).sum(dim=1, keepdim=True).float()  # an unweighted sum of a token's rows
        torch.testing.assert_close(grad_x.float(), x.float() * used, rtol=1e-2, atol=5e-3)
    finally:
        try:
            meet()
        finally:
            ep.close()
