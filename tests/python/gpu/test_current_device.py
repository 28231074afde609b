"""Every entry point leaves the caller's current device as it found it (issue 36).

A reused worker process is rank 0 on GPU 0 in one job and rank 1 on GPU 1 in the next, and calls
moe_a2a with whatever device it last made current. Here every entry point (AllToAll(), the fused
and the split calls, synchronize, check, the rounds test hook, the profiler's collect and reset
in a profiler build, close) is called with another GPU current than the rank's own (the next
one); that GPU must still be current afterwards, and the results must still be right (checked
against moe_a2a.reference). The AllToAll is given the rank's own GPU (device=), not the current
one.

With one GPU visible (MOE_A2A_TEST_ONE_GPU=1 on a one-GPU node: every rank on GPU 0) no other
device can be made current: the same sequence then checks that every entry point keeps GPU 0
current and still gives the right results when the caller's device is already the library's
(the device guards switch nothing and restore nothing).

    torchrun --nproc-per-node=<GPUs> -m pytest tests/python/gpu/test_current_device.py -q
"""

import hooks
import pytest
import torch

import moe_a2a
from moe_a2a import reference as ref
from moe_a2a._ext import ext

needs_profiler = pytest.mark.skipif(
    not ext().profiler_compiled_in(), reason="profiler not compiled in (rebuild with MOE_A2A_PROFILE=1)"
)
EXPERTS_PER_RANK, K, H, T = 4, 2, 1024, 32
ROUNDS_FOR_TEST = 1000  # any count ahead of the rounds run: the round after it must still be right


def keeps_device(other, call, fn, *args):
    """fn(*args) with device `other` current; raises unless `other` is still current after it."""
    torch.cuda.set_device(other)
    out = fn(*args)
    now = torch.cuda.current_device()
    assert now == other, f"{call} changed the current device from {other} to {now}"
    return out


def fake_grouped_gemm(d, rank):
    return (d.expert_x.float() * (1 + rank)).to(d.expert_x.dtype)


def run_round(ep, other, inputs, rank, world, split):
    """One forward round, every call with `other` current; checks dispatch and combine."""
    x, idx, w = (t.to(ep.device) for t in inputs[rank])
    if split:
        pending = keeps_device(other, "dispatch_send", ep.dispatch_send, x, idx, w)
        d = keeps_device(other, "dispatch_recv", ep.dispatch_recv, pending)
        pending = keeps_device(other, "combine_send", ep.combine_send, fake_grouped_gemm(d, rank), d)
        out = keeps_device(other, "combine_recv", ep.combine_recv, pending)
    else:
        d = keeps_device(other, "dispatch", ep.dispatch, x, idx, w)
        out = keeps_device(other, "combine", ep.combine, fake_grouped_gemm(d, rank), d)
    keeps_device(other, "synchronize", ep.synchronize)
    keeps_device(other, "check", ep.check)
    E = ep.num_experts
    got = ref.canonical_dispatch(d.expert_x, d.expert_num_tokens, d.expert_meta, rank)
    ref.assert_dispatch_matches(got, ref.dispatch_reference(inputs, rank, E, world))
    want = ref.moe_reference(inputs, rank, E, world)
    torch.testing.assert_close(out.cpu().float(), want.float(), rtol=1e-2, atol=5e-3)


@pytest.mark.parametrize("profile", [False, pytest.param(True, marks=needs_profiler)], ids=["plain", "profiled"])
def test_entry_points_keep_the_current_device(profile, world, rank):
    own = torch.cuda.current_device()  # the rank's GPU (conftest: LOCAL_RANK, or 0 in the one-GPU run)
    other = (own + 1) % torch.cuda.device_count()  # own itself when only one GPU is visible
    E = EXPERTS_PER_RANK * world
    try:
        ep = keeps_device(
            other,
            "AllToAll()",
            lambda: moe_a2a.AllToAll(
                None, E, K, H, T, torch.bfloat16, device=torch.device("cuda", own), profile=profile
            ),
        )
        try:
            assert ep.device == torch.device("cuda", own)
            for seed, split in ((1, False), (2, True)):
                inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=seed)
                run_round(ep, other, inputs, rank, world, split)
            keeps_device(other, "hooks.set_rounds", lambda n: hooks.set_rounds(ep, n), ROUNDS_FOR_TEST)
            inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=3)
            run_round(ep, other, inputs, rank, world, split=False)
            if profile:
                dump = keeps_device(other, "profile_collect", ep.profile_collect)
                assert dump["rank"] == rank and dump["events"], "the profiler recorded nothing"
                keeps_device(other, "profile_reset", ep.profile_reset)
        finally:
            keeps_device(other, "close", ep.close)
    finally:
        torch.cuda.set_device(own)
