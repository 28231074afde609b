"""Microbenchmarks the speed-of-light model needs, measured in the same process as the
benchmark: one-way flag latency through the symmetric heap (ping-pong kernel)."""

from ._ext import ext
from .heap import SymmetricHeap

RELEASE_ACQUIRE = 0
ATOMIC_WAIT = 1
FENCES = 2


def message_passing(heap: SymmetricHeap, mailbox_offset: int, data_words: int, iters: int, base: int, mode: int,
                    timeout_s: float = 5.0):
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
