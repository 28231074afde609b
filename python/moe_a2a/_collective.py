"""Small host-side collectives used at setup time (never on the hot path)."""

from typing import Any, List

import torch.distributed as dist


def all_gather(obj: Any, group) -> List[Any]:
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out


def require_same(what: str, value: Any, group) -> None:
    """Raises the same error on every rank unless every rank passed an equal `value`."""
    values = all_gather(value, group)
    if any(v != values[0] for v in values):
        listing = "; ".join(f"rank {r}: {v}" for r, v in enumerate(values))
        raise RuntimeError(f"moe_a2a: ranks disagree on {what}: {listing}")
