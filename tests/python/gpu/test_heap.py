"""Symmetric heap and sync primitives across GPUs."""

import pytest
import torch
import torch.distributed as dist
from conftest import meet

import moe_a2a
from moe_a2a import microbench
from moe_a2a._ext import ext

MiB = 1 << 20


@pytest.fixture
def heap():
    h = moe_a2a.SymmetricHeap(dist.group.WORLD, 64 * MiB)
    yield h
    h.close()


def test_pattern_through_translate(heap, world, rank):
    """Every rank writes a pattern into every peer through translate() and raises a flag;
    each peer acquires the flag and checks every word."""
    words = 1 << 20  # 4 MiB per writer
    region = heap.alloc_bytes(world * words * 4)
    flags = heap.alloc_bytes(world * 8)
    for epoch in (1, 2, 3):
        ext().put_pattern(heap._heap, region, words, flags, epoch)
        bad, timeouts = ext().check_pattern(heap._heap, region, words, flags, epoch, 10.0)
        assert timeouts == 0, f"rank {rank}: {timeouts} flags never arrived"
        assert bad == 0, f"rank {rank}: {bad} of {world * words} words wrong"
        meet()  # the next epoch's pattern overwrites this one


def test_check_fails_on_wrong_data(heap, world, rank):
    """The pattern check itself can fail: corrupt one received word and expect a mismatch."""
    words = 4096
    region = heap.alloc_bytes(world * words * 4)
    flags = heap.alloc_bytes(world * 8)
    ext().put_pattern(heap._heap, region, words, flags, 1)
    torch.cuda.synchronize()
    meet()
    mine = ext().check_pattern(heap._heap, region, words, flags, 1, 10.0)
    assert mine == (0, 0)
    view = heap._heap.tensor(rank, region, world * words * 4).view(torch.int32)
    view[5] += 1
    bad, _ = ext().check_pattern(heap._heap, region, words, flags, 1, 10.0)
    assert bad == 1


@pytest.mark.parametrize("mode", [microbench.RELEASE_ACQUIRE, microbench.ATOMIC_WAIT, microbench.FENCES])
def test_message_passing(heap, mode, rank, one_gpu):
    """Data then flag, 20000 times per primitive: the reader must never see the flag without
    the data (64 words, more than one cache line). 200 times on one GPU, where every round
    trip is a time slice and the ranks never run at once."""
    words = 64
    mailbox = heap.alloc_bytes(ext().mailbox_bytes(words))
    bad, timeouts, seconds = microbench.message_passing(heap, mailbox, words, 200 if one_gpu else 20000, 0, mode)
    assert timeouts == 0, f"rank {rank}: ping-pong timed out"
    assert bad == 0, f"rank {rank}: reader saw the flag before {bad} data words"
    assert seconds > 0


def test_peer_view_roundtrip(heap, world, rank):
    t = heap.alloc((world, 1024), torch.float32)
    t.fill_(-1)
    torch.cuda.synchronize()
    meet()
    for peer in range(world):
        heap.peer(t, peer)[rank].fill_(rank * 1000 + peer)
    torch.cuda.synchronize()
    meet()
    expected = torch.tensor([[src * 1000 + rank] * 1024 for src in range(world)], dtype=torch.float32, device=t.device)
    assert torch.equal(t, expected)


def test_alloc_mismatch_raises_on_every_rank(heap, rank):
    heap.alloc_bytes(4096)
    with pytest.raises(RuntimeError, match="differ across ranks"):
        heap.alloc_bytes(4096 + rank * 256)


def test_full_heap_raises_on_every_rank(rank):
    with moe_a2a.SymmetricHeap(dist.group.WORLD, MiB) as h:
        with pytest.raises(RuntimeError):
            h.alloc_bytes(2 * MiB if rank == 0 else 1024)


def test_different_sizes_rejected(rank):
    with pytest.raises(RuntimeError, match="disagree"):
        moe_a2a.SymmetricHeap(dist.group.WORLD, MiB * (1 + rank))


def test_create_close_cycles_do_not_leak():
    # mem_get_info is the device's: every rank measures at the same point of the test (all heaps
    # closed), or a rank sharing the GPU (the one-GPU run) would count the other's live heap.
    torch.cuda.synchronize()
    meet()
    free_before, _ = torch.cuda.mem_get_info()
    heaps_before, maps_before = ext().live_heaps(), ext().open_mappings()
    for _ in range(50):
        h = moe_a2a.SymmetricHeap(dist.group.WORLD, 32 * MiB)
        h.alloc_bytes(MiB)
        h.close()
    torch.cuda.synchronize()
    meet()
    free_after, _ = torch.cuda.mem_get_info()
    assert ext().live_heaps() == heaps_before
    assert ext().open_mappings() == maps_before
    # A leak of one 32 MiB heap per cycle would show as 1.6 GB; allow driver noise only.
    assert free_before - free_after < 64 * MiB, f"{(free_before - free_after) / MiB:.1f} MiB not returned"


def test_flag_latency_is_measured(heap, one_gpu):
    us = microbench.flag_latency_us(heap, iters=200)
    assert 0 < us < (100_000 if one_gpu else 1000)  # one GPU: a time slice (about 2 ms) per one-way trip


@pytest.mark.parametrize("nbytes,blocks", [(196_608, 32), (1 << 20, 7), (16, 1)])
def test_floor_exchange_delivers_every_byte(heap, world, rank, nbytes, blocks, one_gpu):
    """The floor benchmark's bare exchange really moves the bytes: after the timed graph, every
    16-byte vector of this rank's region was written by the previous rank, by the block whose
    contiguous share holds it, in the last round."""
    us = microbench.floor_times_us(heap, nbytes, blocks, iters_per_graph=10, replays=3)
    # Ranks time-sliced on one GPU wait for each other's time slices (milliseconds each, one per
    # rank: over 10 ms an iteration at world 8), so there only a finite time is asked for.
    limit = float("inf") if one_gpu else 10_000
    assert len(us) == 3 and all(0 < u < limit for u in us), f"{us} us an iteration"
    torch.cuda.synchronize()
    meet()  # the peer's last phase is over before its bytes are read
    region, _, workspace = microbench.floor_reserve(heap, nbytes, blocks)
    words = heap._heap.tensor(rank, region, nbytes).view(torch.int32).view(-1, 4).cpu()
    n16 = nbytes // 16
    per_block = (n16 + blocks - 1) // blocks
    want_block = torch.arange(n16) // per_block
    epochs = heap._heap.tensor(rank, workspace, 8 * blocks).view(torch.int64).cpu()
    assert torch.all(words[:, 3] == (rank - 1) % world), "a vector not from the previous rank"
    assert torch.equal(words[:, 1], want_block.to(torch.int32)), "a vector outside its block's share"
    assert torch.all(words[:, 0] == int(epochs[0])), "a vector from an older round"


def test_floor_exchange_rejects_bad_arguments(heap):
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    region, flags, workspace = microbench.floor_reserve(heap, 4096, 8)
    with pytest.raises(RuntimeError, match="blocks must be in"):
        ext().floor_exchange(heap._heap, region, 4096, sms + 1, flags, workspace, 1.0)
    with pytest.raises(RuntimeError, match="multiples of 16"):
        ext().floor_exchange(heap._heap, region, 4095, 8, flags, workspace, 1.0)
    with pytest.raises(RuntimeError, match="outside the heap"):
        ext().floor_exchange(heap._heap, heap._heap.bytes, 4096, 8, flags, workspace, 1.0)
