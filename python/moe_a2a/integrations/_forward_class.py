"""One instance of a model's module given a forward of moe_a2a's, without patching its library:
the instance's class becomes a subclass of its class whose only change is the forward. Its
parameters, buffers and state dict names stay as they were, and isinstance of the model's class
still holds. Used for Llama 4's MoE block (transformers.scored_input_forward) and for a shared
expert launched early (shared_overlap)."""

from __future__ import annotations

import torch


def give_forward_(module: torch.nn.Module, prefix: str, forward, classes: dict) -> None:
    """module.__class__ becomes `prefix` + its class's name, a subclass of its class with
    `forward`, made once per class and kept in `classes` (class -> subclass)."""
    cls = type(module)
    sub = classes.get(cls)
    if sub is None:
        sub = classes[cls] = type(f"{prefix}{cls.__name__}", (cls,), {"forward": forward})
    module.__class__ = sub
