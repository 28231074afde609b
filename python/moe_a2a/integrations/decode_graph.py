"""A transformers model's decode step captured in a CUDA graph, the way serving engines run
decode: the host launches one graph per step instead of the model's hundreds of kernels, and an
expert-parallel model's dispatch and combine run inside it.

    cache = transformers.StaticCache(config=model.config, max_cache_len=prompt_len + new_tokens)
    out = model(input_ids=prompts, past_key_values=cache, use_cache=True)     # prefill, eager
    step = DecodeGraph(model, cache)
    tokens = out.logits[:, -1:].argmax(-1)
    for _ in range(new_tokens):
        tokens = step(tokens).argmax(-1)          # logits [batch, 1, vocab] of the last position

Why it can be captured: a StaticCache keeps its keys, values and length in tensors allocated
once and advanced on the device (transformers' StaticLayer), the model derives positions and
the attention mask from that device-side length, and moe_a2a's dispatch and combine have no
host synchronisation (their round epochs live on the device). A DynamicCache grows by
allocation each step, so it is refused. An expert-parallel model's steps run in a
tokens_per_forward() block of the largest batch of any rank (agreed at the first call, a host
collective): the AllToAll they use and the experts' work on its rows scale with the decode
batch, not with the max_num_tokens that prefill needs. Its experts must run without the counts
on the host: moe_a2a's grouped_gemv (a few rows an expert, weights of either layout, any of
bf16 / fp16 / fp32; moe_a2a.grouped_gemv) or torch._grouped_mm (bf16 on compute capability >= 9.0),
not the per-expert fallback.

Each call copies the new tokens into the graph's input and replays it; the first warmup_steps
calls run eagerly (real steps: they also initialise lazily created state, cuBLAS workspaces
among them) and the next one captures. The returned logits are the graph's own output buffer:
the next call overwrites them (clone them to keep them). Between calls the cache must advance
only through this object (an eager forward on the same cache moves its device-side length past
this object's count of it). Expert-parallel ranks must make the same number of calls, as for
any forward of such a model; their batch sizes may differ (at least one sequence each).
"""

from __future__ import annotations

import contextlib

import torch

from . import transformers as moe_tf

DEFAULT_WARMUP_STEPS = 2


class DecodeGraph:
    """step = DecodeGraph(model, static_cache); logits = step(tokens [batch, 1]): one decode
    step, eager for the first warmup_steps calls, then captured once and replayed (module
    docstring)."""

    def __init__(self, model: torch.nn.Module, cache, *, warmup_steps: int = DEFAULT_WARMUP_STEPS):
        if not getattr(cache, "is_compileable", False):
            raise TypeError(
                f"moe_a2a: DecodeGraph needs a cache of fixed size (transformers.StaticCache), got "
                f"{type(cache).__name__}, which allocates as it grows and cannot be captured in a CUDA graph"
            )
        if warmup_steps < 1:
            raise ValueError(f"moe_a2a: warmup_steps must be >= 1 (eager steps before the capture), got {warmup_steps}")
        self.model, self.cache, self.warmup_steps = model, cache, int(warmup_steps)
        self.capacity = int(cache.get_max_length())
        self.length = None  # tokens in the cache: read from the device once, at the first call
        self.eager_steps = 0
        self.graph = None
        self._tokens = None  # an expert-parallel model's tokens per forward (tokens_per_forward)
        self._ids = None
        self._logits = None

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def _forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        with self._tokens_per_forward():
            return self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1).logits

    def _tokens_per_forward(self):
        """An expert-parallel model's steps run in a tokens_per_forward() block of the largest
        batch of any rank (agreed once, at the first call): its AllToAll and the experts' work
        scale with the decode batch, not with the prefill's max_num_tokens."""
        if self._tokens is None:
            return contextlib.nullcontext()
        return moe_tf.tokens_per_forward(self.model, self._tokens)

    def _check(self, input_ids: torch.Tensor) -> None:
        if input_ids.dim() != 2 or input_ids.shape[1] != 1:
            raise ValueError(
                f"moe_a2a: DecodeGraph takes one new token per sequence, [batch, 1]; got {list(input_ids.shape)}"
            )
        if self._ids is not None and (input_ids.shape != self._ids.shape or input_ids.device != self._ids.device):
            raise ValueError(
                f"moe_a2a: this DecodeGraph was captured for input_ids {list(self._ids.shape)} on {self._ids.device}; "
                f"got {list(input_ids.shape)} on {input_ids.device} (capture another one for another batch)"
            )
        if self.length is None:  # the first call: collective for an expert-parallel model
            self.length = int(self.cache.get_seq_length())
            if moe_tf.is_expert_parallel(self.model):
                self._tokens = moe_tf.tokens_per_forward_of_all(self.model, input_ids.shape[0])
        if self.length >= self.capacity:
            raise ValueError(
                f"moe_a2a: the StaticCache is full ({self.capacity} positions); build it with a larger max_cache_len"
            )

    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        """One decode step: logits [batch, 1, vocab] of the new position (the graph's output
        buffer once captured: valid until the next call)."""
        self._check(input_ids)
        with torch.no_grad():
            if self.eager_steps < self.warmup_steps:
                logits = self._forward(input_ids)
                self.eager_steps += 1
                self._ids = input_ids.clone()
            else:
                if self.graph is None:
                    self._capture()
                self._ids.copy_(input_ids)
                self.graph.replay()
                logits = self._logits
        self.length += 1
        return logits

    def _capture(self) -> None:
        """Records one forward; nothing runs until the replay (the cache's device-side length
        and the inputs are read when the graph replays)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._logits = self._forward(self._ids)
        self.graph = graph
