"""Microbenchmarks the speed-of-light model needs, measured in the same process as the
benchmark: one-way flag latency through the symmetric heap (ping-pong kernel), and the
machine's floor for one kernel per phase (floor_us: a bare exchange in CUDA-graph steady
state, csrc/heap/floor_exchange.h)."""

import weakref

from ._ext import ext
from .heap import SymmetricHeap

RELEASE_ACQUIRE = 0
ATOMIC_WAIT = 1
FENCES = 2


def message_passing(
    heap: SymmetricHeap, mailbox_offset: int, data_words: int, iters: int, base: int, mode: int, timeout_s: float = 5.0
):
    """Ring ping-pong on every rank; returns (mismatches, timeouts, seconds of the writer loop)."""
    return ext().message_passing(heap._heap, mailbox_offset, data_words, iters, base, mode, timeout_s)


def flag_latency_us(heap: SymmetricHeap, iters: int = 1000) -> float:
    """Collective. One-way release/acquire flag latency between neighbouring ranks, in us:
    a round trip (flag to the next rank, ack back) costs two one-way latencies."""
    mailbox = heap.alloc_bytes(ext().mailbox_bytes(0), 256)
    message_passing(heap, mailbox, 0, 50, 0, RELEASE_ACQUIRE)  # warm-up: maps pages, loads code
    bad, timeouts, seconds = message_passing(heap, mailbox, 0, iters, 50, RELEASE_ACQUIRE)
    if bad or timeouts:
        raise RuntimeError(f"moe_a2a: flag ping-pong failed ({bad} mismatches, {timeouts} timeouts)")
    return seconds / (2 * iters) * 1e6


# ---------------------------------------------------------------------------------------------
# The machine's floor for one kernel per phase (csrc/heap/floor_exchange.h): a bare exchange,
# each block storing its share of the bytes into the next rank with 16-byte stores, one signal
# per block on the peer, then a wait for every block of the previous rank.

FLOOR_TIMEOUT_S = 5.0
# heap -> (region_offset, region_bytes, flags_offset, workspace_offset, max_blocks)
_floor_buffers = weakref.WeakKeyDictionary()


def _round16(n: int) -> int:
    return (int(n) + 15) // 16 * 16


def floor_bytes_needed(bytes_each_way: int, blocks: int) -> int:
    """Heap bytes one floor_reserve needs on a fresh heap (region, flags, workspace, alignment)."""
    e = ext()
    return max(_round16(bytes_each_way), 16) + e.floor_flags_bytes(blocks) + e.floor_workspace_bytes(blocks) + 3 * 256


def floor_reserve(heap: SymmetricHeap, bytes_each_way: int, max_blocks: int):
    """Collective. Allocates the floor's region, flags and workspace in `heap` for up to
    bytes_each_way and max_blocks, unless an earlier reservation on this heap is big enough;
    returns (region_offset, flags_offset, workspace_offset). Reserve the largest first: a
    reservation that is too small is not freed (the heap is a bump allocator)."""
    nbytes = max(_round16(bytes_each_way), 16)
    have = _floor_buffers.get(heap)
    if have is not None and have[1] >= nbytes and have[4] >= max_blocks:
        return have[0], have[2], have[3]
    e = ext()
    region = heap.alloc_bytes(nbytes, 256)
    flags = heap.alloc_bytes(e.floor_flags_bytes(max_blocks), 256)
    workspace = heap.alloc_bytes(e.floor_workspace_bytes(max_blocks), 256)
    _floor_buffers[heap] = (region, nbytes, flags, workspace, max_blocks)
    return region, flags, workspace


def floor_times_us(
    heap: SymmetricHeap,
    bytes_each_way: int,
    blocks: int,
    iters_per_graph: int = 100,
    replays: int = 20,
    warmup_replays: int = 2,
    timeout_s: float = FLOOR_TIMEOUT_S,
) -> list:
    """Collective. us per iteration of 2 phases (two launches of the bare exchange), one value
    per graph replay, each the max over the heap's ranks.

    iters_per_graph x 2 launches are captured in one CUDA graph (epochs come from device
    memory, so replays need nothing from the host); before each replay the ranks are aligned
    with a tiny all_reduce; time per iteration = replay time / iters_per_graph. bytes_each_way
    is rounded up to a multiple of 16."""
    import torch
    import torch.distributed as dist

    if iters_per_graph < 1 or replays < 1:
        raise ValueError("iters_per_graph and replays must be >= 1")
    nbytes = _round16(bytes_each_way)
    region, flags, workspace = floor_reserve(heap, nbytes, blocks)
    e = ext()
    dev = heap.device
    group = heap.group

    def zero_state():  # flags and workspace back to 0 on every rank before anyone launches
        torch.cuda.synchronize(dev)
        dist.barrier(group=group)
        heap._heap.tensor(heap.rank, flags, e.floor_flags_bytes(blocks)).zero_()
        heap._heap.tensor(heap.rank, workspace, e.floor_workspace_bytes(blocks)).zero_()
        torch.cuda.synchronize(dev)
        dist.barrier(group=group)

    def phase():
        e.floor_exchange(heap._heap, region, nbytes, blocks, flags, workspace, timeout_s)

    def timeouts():  # the kernel's count of timed-out waits on this rank (workspace[blocks])
        words = heap._heap.tensor(heap.rank, workspace, e.floor_workspace_bytes(blocks)).view(torch.int64)
        return int(words[blocks].item())

    zero_state()
    one = torch.ones(1, device=dev)
    with torch.cuda.device(dev):
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # warm-up outside capture (loads the kernel)
            for _ in range(4):
                phase()
        torch.cuda.current_stream(dev).wait_stream(side)
        torch.cuda.synchronize(dev)
        _raise_on_timeouts(timeouts(), group, dev, "warm-up")  # before a graph of many bounded waits
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(iters_per_graph):
                phase()
                phase()
        us = replay_times_us(
            graph,
            iters_per_graph,
            replays,
            warmup_replays,
            lambda: dist.all_reduce(one, op=dist.ReduceOp.MAX, group=group),
        )  # align the ranks
        del graph
    t = torch.tensor(us + [float(timeouts())], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    _raise_on_timeouts(int(t[-1].item()), None, dev, "timed replays")
    return t[:-1].tolist()


def replay_times_us(graph, iters_per_graph: int, replays: int, warmup_replays: int, align) -> list:
    """This rank's device time per iteration of each timed replay of a captured CUDA graph of
    iters_per_graph iterations, in us: warmup_replays untimed replays first, align() (e.g. a
    tiny all_reduce that lines the ranks up) before every replay, two events around each."""
    import torch

    events = []
    for r in range(warmup_replays + replays):
        align()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        if r >= warmup_replays:
            events.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 / iters_per_graph for s, e in events]


def _raise_on_timeouts(count: int, group, dev, when: str) -> None:
    """Raise on every rank when any rank counted a timed-out wait (group None: count is already
    the max over ranks)."""
    import torch
    import torch.distributed as dist

    if group is not None:
        t = torch.tensor([count], dtype=torch.int64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        count = int(t.item())
    if count > 0:
        raise RuntimeError(f"moe_a2a: floor_exchange timed out during the {when} ({count} waits on some rank)")


def floor_us(
    heap: SymmetricHeap, bytes_each_way: int, blocks: int, iters_per_graph: int = 100, replays: int = 20
) -> float:
    """Collective. The machine's floor for dispatch + combine: median over graph replays of
    the us per 2 phases of the bare exchange (max over ranks per replay, done here with the
    heap's group). See floor_times_us."""
    us = sorted(floor_times_us(heap, bytes_each_way, blocks, iters_per_graph, replays))
    n = len(us)
    return us[n // 2] if n % 2 else 0.5 * (us[n // 2 - 1] + us[n // 2])
