"""Small host-side collectives used at setup time (never on the hot path).

With an NCCL group, an object collective (all_gather_object) and barrier() run on the current
device, and a group bound to one GPU (init_process_group(device_id=...)) refuses any other. The
current device is the caller's, and may be another GPU than the one moe_a2a was given (a reused
worker process), so every collective here takes moe_a2a's device and runs on it (None: the
current device)."""

import contextlib
import weakref
from typing import Any, List

import torch
import torch.distributed as dist


class GroupRef:
    """A weak reference to a process group. moe_a2a objects use their group only to set
    themselves up (and for later collective setup calls such as SymmetricHeap.alloc); holding
    it strongly would keep the group, its store and its port alive after the user's
    destroy_process_group(), so that the next init_process_group on that port fails."""

    def __init__(self, group, owner: str):
        self._ref = weakref.ref(group if group is not None else dist.group.WORLD)
        self._owner = owner

    def get(self):
        group = self._ref()
        if group is None:
            raise RuntimeError(
                f"moe_a2a: the process group this {self._owner} was created with has been destroyed "
                "(destroy_process_group); collective setup calls need it (close() does not)"
            )
        return group


def _on(device):
    return torch.cuda.device(device) if device is not None else contextlib.nullcontext()


def all_gather(obj: Any, group, device=None) -> List[Any]:
    out = [None] * dist.get_world_size(group)
    with _on(device):
        dist.all_gather_object(out, obj, group=group)
    return out


def barrier(group, device=None) -> None:
    with _on(device):
        dist.barrier(group=group)


def require_same(what: str, value: Any, group, device=None) -> None:
    """Raises the same error on every rank unless every rank passed an equal `value`."""
    values = all_gather(value, group, device)
    if any(v != values[0] for v in values):
        listing = "; ".join(f"rank {r}: {v}" for r, v in enumerate(values))
        raise RuntimeError(f"moe_a2a: ranks disagree on {what}: {listing}")
