"""Symmetric heap from Python: one allocation per rank, the same size everywhere, opened by
every peer. Allocations are collective: every rank must make the same calls in the same
order, which is checked (a fingerprint of the call sequence is compared across ranks)."""

from typing import Optional, Sequence

import torch
import torch.distributed as dist

from ._collective import all_gather, require_same
from ._ext import ext


class SymmetricHeap:
    def __init__(self, group, nbytes: int, device: Optional[torch.device] = None):
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = torch.device(device)
        require_same("the symmetric heap size", int(nbytes), self.group)
        self._heap = ext().SymmetricHeap(self.rank, self.world, int(nbytes), self.device.index)
        handles = all_gather(self._heap.export_handle(), self.group)
        self._heap.open_peers(handles)
        # Nobody may write into a peer's heap before that peer has mapped ours too.
        dist.barrier(group=self.group)
        self._offsets = {}  # data_ptr of a tensor alloc() returned -> (offset, nbytes)

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
        views = all_gather(summary, self.group)
        if any(v != views[0] for v in views):
            listing = "; ".join(f"rank {r}: fingerprint {v[0]:#x}, offset {v[1]}, error {v[2]}" for r, v in enumerate(views))
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

    def close(self) -> None:
        """Collective: waits until no rank can still touch our memory, then unmaps and frees."""
        if self._heap.is_closed:
            return
        torch.cuda.synchronize(self.device)
        dist.barrier(group=self.group)
        self._heap.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
