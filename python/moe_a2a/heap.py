"""Symmetric heap from Python: one allocation per rank, the same size everywhere, opened by
every peer. Allocations are collective: every rank must make the same calls in the same
order, which is checked (a fingerprint of the call sequence is compared across ranks).

Lifetime: the process group is used to set the heap up (handle exchange, allocations) and is
held only weakly. close() needs no process group: the ranks agree over the heap itself that
nobody touches a rank's memory any more (a word per peer past the heap, bounded wait), so it
works after destroy_process_group(), from a finalizer and at interpreter exit. A heap that is
never closed is closed when it is garbage collected, or at exit."""

import warnings
import weakref
from typing import Optional, Sequence

import torch
import torch.distributed as dist

from ._collective import GroupRef, all_gather, barrier, require_same
from ._ext import ext

# How long close() waits for the peers to close their side before it frees this rank's
# memory anyway (with a warning naming them).
DEFAULT_CLOSE_TIMEOUT_S = 10.0


def _close_heap(heap, rank: int, timeout_s: float) -> None:
    """Closes the compiled heap; a finalizer, so it holds no reference to the Python object."""
    missing = heap.close(timeout_s)
    if missing:
        peers = [r for r in range(32) if (missing >> r) & 1]
        warnings.warn(
            f"moe_a2a: rank {rank} closed its symmetric heap without hearing from rank(s) {peers} within "
            f"{timeout_s:g} s (they exited, never close, or are far behind); freed this rank's memory "
            "anyway",
            RuntimeWarning,
            stacklevel=3,
        )


class SymmetricHeap:
    def __init__(self, group, nbytes: int, device: Optional[torch.device] = None):
        group = group if group is not None else dist.group.WORLD
        self._group = GroupRef(group, "SymmetricHeap")
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = torch.device(device)
        require_same("the symmetric heap size", int(nbytes), group, self.device)
        self._heap = ext().SymmetricHeap(self.rank, self.world, int(nbytes), self.device.index)
        # Closes at garbage collection or interpreter exit unless close() ran first.
        self._finalizer = weakref.finalize(self, _close_heap, self._heap, self.rank, DEFAULT_CLOSE_TIMEOUT_S)
        handles = all_gather(self._heap.export_handle(), group, self.device)
        self._heap.open_peers(handles)
        # Nobody may write into a peer's heap before that peer has mapped ours too.
        barrier(group, self.device)
        self._offsets = {}  # data_ptr of a tensor alloc() returned -> (offset, nbytes)

    @property
    def group(self):
        """The process group (raises once it has been destroyed: the heap holds it weakly)."""
        return self._group.get()

    @property
    def nbytes(self) -> int:
        return self._heap.bytes

    @property
    def used(self) -> int:
        return self._heap.used

    def alloc_bytes(self, nbytes: int, align: int = 256) -> int:
        """Collective: reserves `nbytes` at the same offset on every rank; returns the offset."""
        try:
            offset = self._heap.allocate(int(nbytes), int(align))
            error = None
        except RuntimeError as e:  # full heap on this rank: the others must raise too
            offset, error = None, str(e)
        summary = (self._heap.fingerprint(), offset, error)
        views = all_gather(summary, self.group, self.device)
        if any(v != views[0] for v in views):
            listing = "; ".join(
                f"rank {r}: fingerprint {v[0]:#x}, offset {v[1]}, error {v[2]}" for r, v in enumerate(views)
            )
            raise RuntimeError(
                "moe_a2a: symmetric heap allocations differ across ranks (every rank must call alloc with the "
                f"same sizes in the same order): {listing}"
            )
        if error is not None:
            raise RuntimeError(error)
        return offset

    def alloc(self, shape: Sequence[int], dtype: torch.dtype, align: int = 256) -> torch.Tensor:
        """Collective: a tensor in the local heap at an offset that is the same on every rank."""
        numel = 1
        for s in shape:
            numel *= int(s)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        offset = self.alloc_bytes(nbytes, align)
        t = self._heap.tensor(self.rank, offset, nbytes).view(dtype).view(*shape)
        self._offsets[t.data_ptr()] = (offset, nbytes)
        return t

    def offset_of(self, t: torch.Tensor) -> int:
        # One byte, not zero: torch reports data_ptr() == 0 for a tensor without elements.
        base = self._heap.tensor(self.rank, 0, 1).data_ptr()
        offset = t.data_ptr() - base
        if not (0 <= offset and offset + t.numel() * t.element_size() <= self.nbytes):
            raise ValueError("moe_a2a: tensor is not inside this symmetric heap")
        return offset

    def peer(self, t: torch.Tensor, rank: int) -> torch.Tensor:
        """The same symmetric object as `t`, on `rank`'s heap (reads and writes go to that GPU)."""
        if not (0 <= rank < self.world):
            raise ValueError(f"moe_a2a: rank {rank} outside world of {self.world}")
        if not t.is_contiguous():
            raise ValueError("moe_a2a: peer() needs a contiguous tensor from alloc()")
        offset = self.offset_of(t)
        nbytes = t.numel() * t.element_size()
        return self._heap.tensor(rank, offset, nbytes).view(t.dtype).view(t.shape)

    @property
    def is_closed(self) -> bool:
        return self._heap.is_closed

    def close(self, timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Every rank must close its heap, but close() is no collective call of a process
        group: it waits for this device's work, tells every peer over the heap that this rank
        no longer touches its memory, waits up to timeout_s until every peer has said the same,
        then unmaps the peers and frees. A peer that did not answer in time (it exited, never
        closes, or is far behind) is named in a RuntimeWarning and this rank's memory is freed
        anyway. Idempotent."""
        if self._finalizer.alive:
            self._finalizer.detach()
            _close_heap(self._heap, self.rank, float(timeout_s))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
