"""A MoE block's shared expert on a second stream, beside the router, the dispatch, the routed
experts and the combine, where the block computes it on its own input after them: in a CUDA graph
capture (a decode step of DecodeGraph, a serving engine's captured step), not in eager forwards.

DeepSeek-V3's block (GLM-4.5's and the other DeepSeek-style blocks alike) returns
`experts(x) + shared_experts(x)`, with x the block's input. On one stream the shared expert
waits for the router, the dispatch, the local experts and the combine, though it reads none of
their results; at a decode step those are small kernels and waits on the link that leave most
SMs idle, and the shared expert's few GEMVs fit beside them. In a graph that takes 20-40 us off a
step of bench_hf_model's model (3 MoE layers; B = 1, 8, 64 a rank, 2 x H200). Eager, the same
overlap made a step 0.33-0.47 ms slower, prefill too (docs/transformers.md, "The shared expert
beside the exchange"). So it is launched only while the current stream is capturing, in a block
whose eager forwards have shown it calling the shared expert that way (Overlap).

How, without patching transformers or the block's forward:
- A forward pre-hook on the block forks a side stream from the current one, launches the shared
  expert on the block's input there, and keeps the result.
- The shared expert module changes class (this instance only: a subclass whose forward is
  `_overlapped_forward`; its parameters and state dict keep their names). Called with the very
  tensor the block received (the same object, its version counter unchanged: nothing wrote it
  in between), it makes the current stream wait for the side stream and returns the kept
  result, which is what its own forward gives for that input. Called with anything else, it
  waits the same way, drops the kept result and runs its own forward.
- A forward hook on the block joins the side stream if nothing took the result. Either way of
  missing turns the overlap off for that block (a forward that raises only drops its result, at
  the next launch): its family calls the shared expert another way (Qwen2-MoE calls it on a view
  of the input, before its router), so launching it early would only compute it twice. Eager
  forwards make the same checks without launching anything, so a capture knows the block's way.
- Nothing is launched while autograd records (the backward would run the shared expert's on the
  side stream; training keeps one stream), off CUDA/HIP, or for an inference tensor (its
  version counter, which proves nothing wrote it, is not kept).

Streams: the side stream starts after everything the current stream had queued (so it reads
the input the block got), and the current stream waits for it before anything uses the result
or the block returns; the side stream allocates only the shared expert's own tensors, after each
fork, so the caching allocator's reuse of its blocks is ordered by those waits. In the capture
the fork and the join become the graph's edges: the branch is part of the graph.
"""

from __future__ import annotations

import torch

from ._forward_class import give_forward_

SHARED_EXPERT_NAMES = ("shared_experts", "shared_expert")  # a MoE block's attribute, by family


class CudaStreams:
    """The current stream and one side stream per device (the overlap's only stream calls; the
    tests without a GPU put a stand-in in `streams`)."""

    def __init__(self):
        self._side = {}

    def on_gpu(self, x: torch.Tensor) -> bool:
        return x.is_cuda

    def capturing(self) -> bool:
        return torch.cuda.is_current_stream_capturing()

    def _side_stream(self, device: torch.device):
        side = self._side.get(device)
        if side is None:
            side = self._side[device] = torch.cuda.Stream(device)
        return side

    def fork(self, device: torch.device):
        """A context in which work goes to the side stream, after what the current stream queued."""
        side = self._side_stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        return torch.cuda.stream(side)

    def join(self, device: torch.device) -> None:
        """The current stream waits for what the side stream queued."""
        torch.cuda.current_stream(device).wait_stream(self._side_stream(device))


streams = CudaStreams()


class Overlap:
    """One block's shared expert launched early: its state between the pre-hook and the call.

    Eager forwards only watch (a probe: is the shared expert called on the block's unchanged
    input?). The first that sees it confirms the block; the first that does not turns the overlap
    off. A capture launches it early only in a confirmed block, so a graph never holds a launch
    that the block does not use (DecodeGraph's eager steps come first)."""

    def __init__(self, base_forward):
        self.base_forward = base_forward  # the shared expert class's own forward
        self.enabled = True  # no forward has shown the block calling it another way
        self.confirmed = False  # a forward has shown the block calling it on its input
        self.pending = None  # (the block's input, its version, the early output or None for a probe)
        self.taken = 0  # early outputs the block used (the tests' evidence; bench_hf_model reports it)

    def launch(self, shared: torch.nn.Module, x) -> None:
        self._drop()  # a forward that raised left it (one that returned was settled)
        if not (self.enabled and isinstance(x, torch.Tensor) and streams.on_gpu(x)):
            return
        if torch.is_grad_enabled() or x.is_inference():
            return
        out = None
        if self.confirmed and streams.capturing():
            with streams.fork(x.device):
                out = self.base_forward(shared, x)
        self.pending = (x, x._version, out)

    def take(self, args, kwargs):
        """The early output if the call is the shared expert on the block's unchanged input (the
        side stream joined first), else None: the caller computes it (and where the call was not
        that, the overlap is off)."""
        pending = self.pending
        if not self._drop():
            return None
        x, version, out = pending
        if len(args) == 1 and not kwargs and args[0] is x and x._version == version:
            self.confirmed = True
            self.taken += out is not None
            return out
        self.enabled = False
        return None

    def settle(self) -> None:
        """The block's forward returned: a launch or probe nobody took turns the overlap off."""
        if self._drop():
            self.enabled = False

    def _drop(self) -> bool:
        """Drops what launch kept (joining the side stream if it launched); whether it kept any."""
        pending, self.pending = self.pending, None
        if pending is not None and pending[2] is not None:
            streams.join(pending[0].device)
        return pending is not None


def _overlapped_forward(self, *args, **kwargs):
    out = self._moe_a2a_overlap.take(args, kwargs)
    return out if out is not None else self._moe_a2a_overlap.base_forward(self, *args, **kwargs)


_overlapped_classes = {}  # a shared expert's class -> its subclass with _overlapped_forward


def shared_expert_of(block: torch.nn.Module):
    """The block's shared expert module, or None."""
    for name in SHARED_EXPERT_NAMES:
        m = getattr(block, name, None)
        if isinstance(m, torch.nn.Module):
            return m
    return None


def overlap_states(model: torch.nn.Module) -> list:
    """The Overlap of every block of `model` that has one, in module order."""
    found = (getattr(shared_expert_of(m), "_moe_a2a_overlap", None) for m in model.modules())
    return [state for state in found if state is not None]


def overlap_shared_expert_(block: torch.nn.Module) -> Overlap:
    """Launches `block`'s shared expert on a side stream at the start of each of its forwards
    (module docstring), in place: hooks on the block, a class of its own for the shared expert.
    Returns the state (Overlap.taken counts the results used)."""
    shared = shared_expert_of(block)
    if shared is None:
        raise ValueError(f"moe_a2a: {type(block).__name__} has no shared expert ({' or '.join(SHARED_EXPERT_NAMES)})")
    if getattr(shared, "_moe_a2a_overlap", None) is not None:
        return shared._moe_a2a_overlap
    state = Overlap(type(shared).forward)
    shared._moe_a2a_overlap = state
    give_forward_(shared, "Overlapped", _overlapped_forward, _overlapped_classes)
    block.register_forward_pre_hook(_launch_hook, with_kwargs=True)
    block.register_forward_hook(_settle_hook)
    return state


# The hooks find the state through the block they are called with, not a closure: a deep copy of
# the model copies the hooks by reference, and each copy must reach its own shared expert.
def _launch_hook(block, args, kwargs):
    shared = shared_expert_of(block)
    shared._moe_a2a_overlap.launch(shared, args[0] if args else kwargs.get("hidden_states"))


def _settle_hook(block, args, output):
    shared_expert_of(block)._moe_a2a_overlap.settle()
