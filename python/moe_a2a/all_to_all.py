"""The user API: AllToAll with dispatch / combine and their split halves.

    ep = AllToAll(group, num_experts, experts_per_token, hidden_dim, max_num_tokens, dtype)
    d = ep.dispatch(x, topk_idx, topk_weights)   # d.expert_x [E_local, capacity, H]
    y = experts(d.expert_x, d.expert_num_tokens)
    out = ep.combine(y, d)                       # [T, H]
    ep.close()

No call synchronises with the host; errors found on the device (a bad expert id, an expert
over capacity, a peer that never answered) are raised by the next dispatch or by
synchronize(). Each dispatch must be combined before the next dispatch.

profile=True records every kernel with the in-kernel profiler (a build with MOE_A2A_PROFILE=1);
moe_a2a.trace.save(path) writes what was recorded as one Perfetto trace for all ranks.
"""

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.distributed as dist

from ._collective import require_same
from ._ext import ext
from .heap import SymmetricHeap

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
# Default budget for the padded per-expert output of one dispatch; the worst case (every
# token to one expert) is used when it fits.
DEFAULT_OUTPUT_BUDGET_BYTES = 4 << 30
# Profiler records kept per track (one track per wave of a block; 24 bytes a record).
DEFAULT_PROFILE_CAPACITY = 512


@dataclass
class Dispatched:
    """What dispatch delivers to this rank's experts, plus what combine needs.

    expert_x:          [E_local, capacity, H]; rows past expert_num_tokens[e] are undefined
    expert_num_tokens: [E_local] int32, on the device
    expert_meta:       [E_local, capacity, 3] int32: source rank, source token, k
    expert_weights:    [E_local, capacity] float32: the router weight of that (token, k)
    """

    expert_x: torch.Tensor
    expert_num_tokens: torch.Tensor
    expert_meta: torch.Tensor
    expert_weights: torch.Tensor
    num_tokens: int = 0  # tokens this rank dispatched (rows of combine's output)
    _round: int = field(default=-1, repr=False)


@dataclass
class _Pending:
    round: int
    num_tokens: int


class AllToAll:
    def __init__(
        self,
        group,
        num_experts: int,
        experts_per_token: int,
        hidden_dim: int,
        max_num_tokens: int,
        dtype: torch.dtype = torch.bfloat16,
        *,
        max_recv_tokens_per_expert: Optional[int] = None,
        timeout_s: float = 5.0,
        device: Optional[torch.device] = None,
        profile: bool = False,
        profile_capacity: int = DEFAULT_PROFILE_CAPACITY,
    ):
        """Collective: every rank of `group` must call it with the same arguments.

        profile=True turns the in-kernel profiler on (needs a build with MOE_A2A_PROFILE=1);
        profile_capacity is the number of records each wave of each block keeps, later ones
        are counted as dropped."""
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        if dtype not in _DTYPES:
            raise TypeError(f"moe_a2a: dtype must be torch.bfloat16 or torch.float16, got {dtype}")
        self.num_experts = int(num_experts)
        self.experts_per_token = int(experts_per_token)
        self.hidden_dim = int(hidden_dim)
        self.max_num_tokens = int(max_num_tokens)
        self.dtype = dtype
        C = ext()
        self.profile = bool(profile)
        if self.profile and not C.profiler_compiled_in():
            raise RuntimeError(
                "moe_a2a: AllToAll(profile=True) needs the in-kernel profiler, which this build does not have. "
                "Rebuild with it: MOE_A2A_PROFILE=1 python setup.py build_ext --inplace --force "
                "(or MOE_A2A_PROFILE=1 pip install --no-build-isolation -e .)"
            )
        if self.profile and not 1 <= int(profile_capacity) <= (1 << 20):
            raise ValueError(f"moe_a2a: profile_capacity must be in [1, 2^20], got {profile_capacity}")
        if max_recv_tokens_per_expert is None:
            capacity = C.default_capacity(self.world, self.num_experts, self.experts_per_token, self.hidden_dim,
                                          self.max_num_tokens, DEFAULT_OUTPUT_BUDGET_BYTES) \
                if self.num_experts % max(self.world, 1) == 0 and self.num_experts >= self.world else 1
        else:
            capacity = int(max_recv_tokens_per_expert)
        self.capacity = capacity
        config = (self.world, self.num_experts, self.experts_per_token, self.hidden_dim, self.max_num_tokens,
                  self.capacity, _DTYPES[dtype], float(timeout_s), self.profile)
        require_same("the AllToAll config (world, experts, topk, hidden, max tokens, capacity, dtype, timeout, "
                     "profile)", config, self.group)
        problem = C.validate_config(self.world, self.rank, self.num_experts, self.experts_per_token, self.hidden_dim,
                                    self.max_num_tokens, self.capacity)
        if problem:
            raise ValueError(f"moe_a2a: {problem}")
        self.experts_per_rank = self.num_experts // self.world

        region = C.ep_region_bytes(self.world, self.num_experts, self.experts_per_token, self.hidden_dim,
                                   self.max_num_tokens, self.capacity)
        mailbox = C.profiler_mailbox_bytes() if self.profile else 0  # clock-sync ping-pong
        self.heap = SymmetricHeap(self.group, region + mailbox, device)
        self.device = self.heap.device
        offset = self.heap.alloc_bytes(region, 256)
        self.heap_bytes = region
        self._engine = C.create_engine(self.heap._heap, self.num_experts, self.experts_per_token, self.hidden_dim,
                                       self.max_num_tokens, self.capacity, _DTYPES[dtype], offset, float(timeout_s))
        if self.profile:
            C.engine_enable_profiler(self._engine, int(profile_capacity), self.heap.alloc_bytes(mailbox, 256))
            # Imported here, not at the top: `python -m moe_a2a.trace` must find it unimported.
            from . import trace

            trace._register(self)
        # Orders this all-to-all's ops for torch.compile (schemas mark it mutated).
        self._state = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._round = 0
        self._closed = False

    # ---- split calls, for overlapping communication with other work ----
    def dispatch_send(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor) -> _Pending:
        self._check_open()
        torch.ops.moe_a2a.dispatch_send(self._engine, self._state, x, topk_idx, topk_weights)
        self._round += 1
        return _Pending(self._round, x.shape[0])

    def dispatch_recv(self, pending: _Pending) -> Dispatched:
        self._check_round(pending.round, "dispatch_recv")
        ex, counts, meta, weights = torch.ops.moe_a2a.dispatch_recv(self._engine, self._state)
        return Dispatched(ex, counts, meta, weights, pending.num_tokens, pending.round)

    def combine_send(self, expert_y: torch.Tensor, dispatched: Dispatched) -> _Pending:
        self._check_round(dispatched._round, "combine")
        torch.ops.moe_a2a.combine_send(self._engine, self._state, expert_y)
        return _Pending(dispatched._round, dispatched.num_tokens)

    def combine_recv(self, pending: _Pending) -> torch.Tensor:
        self._check_round(pending.round, "combine_recv")
        return torch.ops.moe_a2a.combine_recv(self._engine, self._state, pending.num_tokens)

    # ---- fused calls ----
    def dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor) -> Dispatched:
        return self.dispatch_recv(self.dispatch_send(x, topk_idx, topk_weights))

    def combine(self, expert_y: torch.Tensor, dispatched: Dispatched) -> torch.Tensor:
        return self.combine_recv(self.combine_send(expert_y, dispatched))

    # ---- profiler ----
    def profile_collect(self) -> dict:
        """Collective: waits for this rank's kernels, syncs clocks with rank 0 and returns the
        records so far (raw ticks, see moe_a2a.trace), then starts recording afresh."""
        self._check_open()
        if not self.profile:
            raise RuntimeError("moe_a2a: this AllToAll was created without profile=True")
        return ext().engine_profile_collect(self._engine)

    def profile_reset(self) -> None:
        """Forgets the records so far (enqueued on the current stream; not collective)."""
        self._check_open()
        if not self.profile:
            raise RuntimeError("moe_a2a: this AllToAll was created without profile=True")
        ext().engine_profile_reset(self._engine)

    # ---- errors and lifetime ----
    def check(self) -> None:
        """Raises if the device reported an error; does not synchronise."""
        self._check_open()
        ext().engine_check(self._engine)

    def synchronize(self) -> None:
        """Waits for this rank's work on the current stream, then raises any device error."""
        self._check_open()
        torch.cuda.current_stream(self.device).synchronize()
        ext().engine_check(self._engine)

    def close(self) -> None:
        """Collective."""
        if self._closed:
            return
        self._closed = True
        torch.cuda.synchronize(self.device)
        ext().engine_close(self._engine)
        self.heap.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self):
        if self._closed:
            raise RuntimeError("moe_a2a: AllToAll used after close()")

    def _check_round(self, round_: int, call: str):
        self._check_open()
        if round_ != self._round:
            raise RuntimeError(
                f"moe_a2a: {call} was given the result of dispatch #{round_}, but the latest dispatch is #{self._round}"
            )
