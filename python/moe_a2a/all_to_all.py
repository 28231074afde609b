"""The user API: AllToAll with dispatch / combine and their split halves.

    ep = AllToAll(group, num_experts, experts_per_token, hidden_dim, max_num_tokens, dtype)
    d = ep.dispatch(x, topk_idx, topk_weights)   # d.expert_x [E_local, capacity, H] (padded)
    y = experts(d.expert_x, d.expert_num_tokens)
    out = ep.combine(y, d)                       # [T, H]
    ep.close()

layout="packed" delivers the rows of all local experts back to back instead, expert_x
[max_recv_tokens, H] with expert e's rows from d.expert_offsets[e], ready for grouped GEMMs.

dispatch_dtype=torch.float8_e4m3fn (or float8_e4m3fnuz, what MI300X GEMMs read) moves fp8 rows:
dispatch quantizes x on the fly, one fp32 scale per token and 128 channels (d.expert_x_scale),
or sends rows the caller quantized (dispatch(x_fp8, ..., x_scale=...)). Combine stays in dtype.

dispatch() and combine() are differentiable (torch.autograd): dispatch with respect to x,
combine with respect to the experts' output and the topk_weights given to dispatch. Each
backward is a round of its own on the same AllToAll, replaying the placement of its forward
round, so like the forward calls it is collective: every rank must run backward through
every dispatch and combine that needs a gradient on any rank.

No call synchronises with the host; errors found on the device (a bad expert id, an expert
over capacity, a peer that never answered) are raised by the next dispatch or by
synchronize(). Each dispatch must be combined before the next dispatch, unless the AllToAll has
num_buffers > 1: then up to num_buffers dispatches may be outstanding (dispatch A, dispatch B,
combine A, combine B), each round in a buffer of its own.

profile=True records every kernel with the in-kernel profiler (a build with MOE_A2A_PROFILE=1);
moe_a2a.trace.save(path) writes what was recorded as one Perfetto trace for all ranks.

The AllToAll works on device= (default: the device current when it is created), and no call
changes the caller's current device (docs/design/lifetime.md).
"""

# This file is the user API and each round's bookkeeping. AllToAll's arguments (their defaults, their
# checks, the core's config) are in _arguments.py; the rounds as torch ops, with autograd, in _rounds.py.
import weakref
from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

import torch
import torch.distributed as dist

from ._arguments import (
    DEFAULT_PROFILE_CAPACITY,
    _capacity_argument,
    _check_arguments,
    _check_blocks,
    _check_profiler,
    _choose_capacity,
    _core_config,
    _tuning_from_env,
    _validate,
)
from ._collective import GroupRef, require_same
from ._ext import ext
from ._rounds import (
    _check_dispatch_outputs_match_core,
    _combine_round,
    _CombineFunction,
    _dispatch_round,
    _DispatchFunction,
    _DispatchOutputs,
    _needs_grad,
    _Route,
)
from .heap import DEFAULT_CLOSE_TIMEOUT_S, SymmetricHeap


@dataclass
class Dispatched:
    """What dispatch delivers to this rank's experts, plus what combine needs.

    Rows are those of expert_x seen as [rows, H]; expert e owns rows expert_offsets[e] ..
    expert_offsets[e] + expert_num_tokens[e] - 1, and rows of no expert are undefined.

    expert_x:          padded [E_local, capacity, H]; packed [capacity, H]; the AllToAll's
                       dtype, or its dispatch_dtype (fp8)
    expert_x_scale:    fp8 dispatch only (else None): [..rows.., ceil(H / 128)] float32, row-major
                       per row: expert_x[row, c] * expert_x_scale[row, c // 128] is the token's
                       value (moe_a2a.reference.dequantize_fp8). A GEMM that wants them
                       channel-block-major takes expert_x_scale.transpose(-1, -2).contiguous().
    expert_num_tokens: [E_local] int32, on the device
    expert_offsets:    [E_local + 1] int32, on the device: first row of each expert; packed:
                       expert_offsets[e + 1] = expert_offsets[e] + expert_num_tokens[e] rounded
                       up to expert_alignment (default 1: no padding; padding rows are zeros),
                       so expert_offsets[1:] are the group ends of torch._grouped_mm
    expert_meta:       [..rows.., 3] int32: source rank, source token, k
    expert_weights:    [..rows..] float32: the router weight of that (token, k); rows of no
                       expert undefined. With weights_at_experts, differentiable: its gradient
                       goes to dispatch's topk_weights (rows of no expert: not read)

    Aliasing: every tensor here is a fresh tensor of the caller's (torch's allocator, the
    current stream), not a view of an internal buffer: it stays valid and unchanged for as
    long as it is kept, whatever later dispatches do. Only combining is tied to the round:
    combine() with a Dispatched from an older dispatch raises. Every tensor here (and of the
    route) is an allocation of its own, sharing storage with no other (torch.compile requires
    that of a custom op's outputs).
    """

    expert_x: torch.Tensor
    expert_num_tokens: torch.Tensor
    expert_offsets: torch.Tensor
    expert_meta: torch.Tensor
    expert_weights: torch.Tensor
    expert_x_scale: Optional[torch.Tensor] = None
    num_tokens: int = 0  # tokens this rank dispatched (rows of combine's output)
    _round: int = field(default=-1, repr=False)
    _route: Optional[_Route] = field(default=None, repr=False)
    _topk_weights: Optional[torch.Tensor] = field(default=None, repr=False)  # combine's gradient lands here


@dataclass
class _Pending:
    """Between the two halves of a split call: dispatch_send -> dispatch_recv carries the
    token side of the route and the weights; combine_send -> combine_recv the Dispatched."""

    round: int
    dest_mask: Optional[torch.Tensor] = None
    topk_weights: Optional[torch.Tensor] = None
    dispatched: Optional[Dispatched] = None


def _close_engines(engines, heap: SymmetricHeap, timeout_s: float) -> None:
    """Closes an AllToAll's engines, then its heap; a finalizer, so it holds no reference to the
    AllToAll."""
    for engine in engines:
        ext().engine_close(engine)  # waits for the device, frees the engine's local buffers
    heap.close(timeout_s)


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
        layout: str = "padded",
        max_recv_tokens: Optional[int] = None,
        max_recv_tokens_per_expert: Optional[int] = None,
        timeout_s: float = 5.0,
        device: Optional[torch.device] = None,
        num_sms: Optional[int] = None,
        groups_per_block: Optional[int] = None,
        send_sms: Union[str, int, Tuple[int, int], None] = None,
        expert_alignment: int = 1,
        num_buffers: int = 1,
        dispatch_dtype: Optional[torch.dtype] = None,
        fp8_pow2_scales: bool = False,
        profile: bool = False,
        profile_capacity: int = DEFAULT_PROFILE_CAPACITY,
        weights_at_experts: bool = False,
    ):
        """Collective: every rank of `group` must call it with the same arguments.

        layout: "padded" (expert_x [E_local, capacity, H], capacity = max_recv_tokens_per_expert)
        or "packed" (expert_x [capacity, H], capacity = max_recv_tokens, all local experts'
        rows back to back). dtype: bfloat16, float16 or float32 tokens.

        expert_alignment (packed only, default 1): every expert's rows start at a multiple of
        it, for grouped GEMMs with M-tile constraints. Expert e's segment is then
        [expert_offsets[e], expert_offsets[e + 1]) with expert_offsets[e + 1] - expert_offsets[e]
        = expert_num_tokens[e] rounded up to the alignment; its padding rows are zeros (so a
        GEMM over whole segments, and its weight gradient, see no garbage). The default
        capacity includes the worst-case padding, E_local x (alignment - 1) rows.

        num_buffers (default 1): dispatches that may be outstanding (not yet combined) at once,
        for pipelines that dispatch the next micro-batch or layer before combining this one.
        Round n uses buffer (n - 1) % num_buffers, a complete set of the heap region and
        device state of its own, so heap_bytes grows num_buffers times; a dispatch whose buffer
        still holds an uncombined round raises. Calls of all buffers go on one stream: kernels of
        two buffers running at once on two streams could take every compute unit and wait for
        each other's peers, unless num_sms leaves room for both.

        dispatch_dtype (default None: rows keep dtype): torch.float8_e4m3fn (max 448, what
        NVIDIA fp8 GEMMs read) or torch.float8_e4m3fnuz (max 240, MI300X's). dispatch then
        delivers fp8 expert_x and its expert_x_scale, one fp32 scale per token and 128 channels
        (the last block shorter when H is not a multiple of 128; H must be a multiple of 16):
        scale = max(amax, 1e-30) / fp8 max, q = round-to-nearest-even(clamp(x / scale)), exactly
        moe_a2a.reference.quantize_fp8. A block holding inf or NaN dequantizes to NaN (only that
        block of that token). fp8_pow2_scales=True rounds every scale up to a power of two
        (UE8M0-style). fp8 dispatch is forward-only: dispatch raises if x requires grad. Combine,
        and everything else, stays in dtype; the heap is the same size (fp8 rows and their
        scales use the first bytes of each row slot).

        num_sms: blocks (one per compute unit) that every kernel of this all-to-all uses, at
        most the device's compute units (the default); fewer leave the rest to work that
        overlaps the split calls. groups_per_block: token groups each block sends per call at
        most (default 1, or MOE_A2A_GROUPS_PER_BLOCK), twice that where those would hold more
        than 16 tokens each: more pipeline large batches better, fewer cost fewer signals. Both
        must be the same on every rank.

        send_sms (default "auto", or MOE_A2A_SEND_SMS as "auto", "n" or "dispatch,combine"): in
        the fused dispatch and combine, how many of the num_sms blocks only send; the others only
        receive. 0: every block sends its share, then receives its share. "auto": split when every
        item of each half (a token group, a combine unit) gets a block of its own, which at a few
        tokens per rank starts the receive half while the tokens are being sent, and dispatch in
        halves from 1024 tokens per rank on, so that the link and the copies into expert_x overlap
        (not where it quantizes rows into fp8); else 0. An int sets both kernels, a pair
        (dispatch, combine) each (for experiments: docs/design/protocol.md, "Sending and receiving
        blocks"). The split calls (dispatch_send, ...) always use every block. Part of the config:
        the same on every rank. self.send_sms holds the pair, -1 for "auto".

        profile=True turns the in-kernel profiler on (needs a build with MOE_A2A_PROFILE=1);
        profile_capacity is the number of records each wave of each block keeps, later ones
        are counted as dropped.

        weights_at_experts=True (training): the experts apply the router weights, not combine.
        combine() then sums the rows unweighted, and d.expert_weights is differentiable: an
        expert that scales its rows by it (for a SwiGLU expert, its hidden activation h before
        the down projection: y = (w * h) @ w_down) gets the weight's gradient from its own
        backward, over F values of h instead of H of y, and dispatch's backward carries it home to
        topk_weights. The backward of combine then reads no expert output: it is the frozen
        router's round (docs/design/weights-at-experts.md). The same on every rank."""
        group = group if group is not None else dist.group.WORLD
        self._group = GroupRef(group, "AllToAll")
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        _check_arguments(dtype, layout, num_buffers, profile, dispatch_dtype)
        asked_capacity = _capacity_argument(layout, max_recv_tokens, max_recv_tokens_per_expert)
        self.layout = layout
        self.num_experts = int(num_experts)
        self.experts_per_token = int(experts_per_token)
        self.hidden_dim = int(hidden_dim)
        self.max_num_tokens = int(max_num_tokens)
        self.dtype = dtype
        self.dispatch_dtype = dispatch_dtype
        self.fp8_pow2_scales = bool(fp8_pow2_scales)
        self.weights_at_experts = bool(weights_at_experts)
        _check_dispatch_outputs_match_core()
        self.profile = bool(profile)
        _check_profiler(self.profile, profile_capacity)
        dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        self.num_sms = sms if num_sms is None else int(num_sms)
        self.groups_per_block, self.send_sms = _tuning_from_env(groups_per_block, send_sms)
        self.expert_alignment = int(expert_alignment)
        config = _core_config(self)
        self.capacity = _choose_capacity(asked_capacity, config)
        config["capacity"] = self.capacity
        self.num_buffers = int(num_buffers)
        # Sameness first: validate_config reads only the config, so once it is the same everywhere it
        # raises on every rank or on none, and no rank waits in the heap's collectives for one that raised.
        self._require_same_everywhere(config, timeout_s, group, dev)
        _validate(config)
        _check_blocks(self.num_sms, sms)  # after the sameness check: on every rank alike where the GPUs are alike
        self.experts_per_rank = self.num_experts // self.world
        offsets = self._allocate_heap(config, group, device)
        self._config, self._region_offsets = config, offsets  # the tests' hooks read them (tests/python/gpu/hooks.py)
        self._create_engines(offsets, config, timeout_s)
        if self.profile:
            self._start_profiler(profile_capacity)
        # Orders this all-to-all's ops for torch.compile (schemas mark it mutated).
        self._state = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._round = 0  # dispatches so far; dispatch n is round n, in buffer (n - 1) % num_buffers
        self._open = [None] * self.num_buffers  # per buffer: the round dispatched there and not yet combined
        self._closed = False

    def _require_same_everywhere(self, config: dict, timeout_s: float, group, dev: torch.device) -> None:
        """Collective: raises on every rank unless every rank has the same config (but its rank),
        num_buffers, timeout_s, profile and weights_at_experts."""
        same_everywhere = {k: v for k, v in config.items() if k != "rank"}
        require_same(
            f"the AllToAll config ({', '.join(same_everywhere)}, num_buffers, timeout_s, profile, weights_at_experts)",
            (same_everywhere, self.num_buffers, float(timeout_s), self.profile, self.weights_at_experts),
            group,
            dev,
        )

    def _allocate_heap(self, config: dict, group, device) -> list:
        """Collective: the symmetric heap, one region per buffer and the profiler's mailbox; returns
        the regions' offsets (the mailbox is allocated by _start_profiler)."""
        C = ext()
        region = C.ep_region_bytes(**config)
        mailbox = C.profiler_mailbox_bytes() if self.profile else 0  # clock-sync ping-pong
        self.heap = SymmetricHeap(group, self.num_buffers * region + mailbox, device)
        self.device = self.heap.device
        offsets = [self.heap.alloc_bytes(region, 256) for _ in range(self.num_buffers)]
        self.heap_bytes = self.num_buffers * region
        return offsets

    def _create_engines(self, offsets: list, config: dict, timeout_s: float) -> None:
        """One engine per buffer: its own heap region, workspace, epochs and round order."""
        self._engines = []
        # Closes the engines in the list and the heap at garbage collection or interpreter exit, unless
        # close() ran first; registered before the first engine, so one that fails to build leaves
        # those built before it to the finalizer.
        self._finalizer = weakref.finalize(self, _close_engines, self._engines, self.heap, DEFAULT_CLOSE_TIMEOUT_S)
        for offset in offsets:
            self._engines.append(ext().create_engine(self.heap._heap, offset, float(timeout_s), **config))

    def _start_profiler(self, profile_capacity: int) -> None:
        """Turns the in-kernel profiler on in buffer 0's engine (profile=True allows one buffer), with
        the mailbox _allocate_heap reserved, and registers this AllToAll for moe_a2a.trace."""
        C = ext()
        C.engine_enable_profiler(
            self._engine, int(profile_capacity), self.heap.alloc_bytes(C.profiler_mailbox_bytes(), 256)
        )
        # Imported here, not at the top: only an AllToAll that profiles needs the trace package.
        from .trace.build import _register

        _register(self)

    @property
    def _engine(self) -> int:
        """The engine of buffer 0 (with num_buffers=1, the only one)."""
        return self._engines[0]

    def _buffer(self, round_: int) -> int:
        return (round_ - 1) % self.num_buffers

    def _next_dispatch(self, call: str):
        """(round, engine) of the next dispatch; raises if its buffer still holds a round."""
        self._check_open()
        round_ = self._round + 1
        b = self._buffer(round_)
        if self._open[b] is not None:
            ext().engine_check(self._engines[b])  # an engine that failed says so first
            raise RuntimeError(
                f"moe_a2a: {call} called out of order: dispatch #{round_} needs buffer {b}, which still holds "
                f"dispatch #{self._open[b]}, not yet combined; num_buffers={self.num_buffers} allows "
                f"{self.num_buffers} outstanding dispatch(es): combine first, or create the AllToAll with more buffers"
            )
        return round_, self._engines[b]

    def _began(self, round_: int) -> None:
        """The dispatch of `round_` was enqueued: its buffer is held until it is combined."""
        self._round = round_
        self._open[self._buffer(round_)] = round_

    # ---- split calls, for overlapping communication with other work (not differentiable) ----
    def dispatch_send(
        self,
        x: torch.Tensor,
        topk_idx: torch.Tensor,
        topk_weights: torch.Tensor,
        x_scale: Optional[torch.Tensor] = None,
    ) -> _Pending:
        round_, engine = self._next_dispatch("dispatch_send")
        self._no_grad_in_split_calls("dispatch_send", x, topk_weights)
        dest_mask = torch.ops.moe_a2a.dispatch_send(engine, self._state, x, x_scale, topk_idx, topk_weights)
        self._began(round_)
        return _Pending(round_, dest_mask=dest_mask, topk_weights=topk_weights)

    def dispatch_recv(self, pending: _Pending) -> Dispatched:
        engine = self._check_round(pending.round, "dispatch_recv")
        out = _DispatchOutputs(*torch.ops.moe_a2a.dispatch_recv(engine, self._state))
        return self._dispatched(pending.round, out, pending.dest_mask, pending.topk_weights)

    def combine_send(self, expert_y: torch.Tensor, dispatched: Dispatched) -> _Pending:
        engine = self._check_round(dispatched._round, "combine")
        self._no_grad_in_split_calls("combine_send", expert_y, dispatched._topk_weights)
        r = dispatched._route
        torch.ops.moe_a2a.combine_send(
            engine, self._state, expert_y, self._combine_weights(dispatched), r.src_tokens, r.recv_token, r.recv_pos
        )
        return _Pending(dispatched._round, dispatched=dispatched)

    def combine_recv(self, pending: _Pending) -> torch.Tensor:
        engine = self._check_round(pending.round, "combine_recv")
        out = torch.ops.moe_a2a.combine_recv(engine, self._state, pending.dispatched._route.dest_mask)
        self._open[self._buffer(pending.round)] = None
        return out

    # ---- fused calls (differentiable) ----
    def dispatch(
        self,
        x: torch.Tensor,
        topk_idx: torch.Tensor,
        topk_weights: torch.Tensor,
        x_scale: Optional[torch.Tensor] = None,
    ) -> Dispatched:
        """Differentiable with respect to x. The gradient of topk_weights comes from combine.

        A topk_idx entry of -1 is an unused slot: no row is sent for it, its weight is ignored,
        combine skips it, and its weight's gradient is 0. Other negative ids are bad input.

        With fp8 dispatch (dispatch_dtype), x is quantized here, or, with x_scale
        [T, ceil(H / 128)] float32, x is already fp8 (dispatch_dtype) and is sent as given."""
        round_, engine = self._next_dispatch("dispatch")
        # topk_weights goes to the op detached: its gradient is combine's business (combine keeps
        # the undetached tensor), so dispatch's backward runs exactly when x needs a gradient, and
        # the op (no autograd kernel) never reaches torch's deprecated autograd fallback, whose
        # grad_fn warns when backward gets to it.
        w = topk_weights.detach() if topk_weights.requires_grad else topk_weights
        # With the weights at the experts, topk_weights' gradient comes back through dispatch's backward.
        weights_here = self.weights_at_experts and _needs_grad(topk_weights)
        if _needs_grad(x) or weights_here:
            if self.dispatch_dtype is not None:
                raise RuntimeError(
                    "moe_a2a: fp8 dispatch is forward-only and x (or, with weights_at_experts, topk_weights) "
                    "requires grad; for training create the AllToAll without dispatch_dtype (bf16 rows), or "
                    "dispatch under torch.no_grad()"
                )
            *out, dest_mask = _DispatchFunction.apply(
                engine, self._state, x, topk_idx, topk_weights if weights_here else w, self.weights_at_experts
            )
            out = _DispatchOutputs(*out)
        else:
            out, dest_mask = _dispatch_round(engine, self._state, x, x_scale, topk_idx, w)
        self._began(round_)
        # An unused slot's weight gets a zero gradient from combine's backward (the route marks it).
        # With the weights at the experts combine takes none, so it gets no topk_weights to differentiate.
        return self._dispatched(round_, out, dest_mask, None if self.weights_at_experts else topk_weights)

    def combine(self, expert_y: torch.Tensor, dispatched: Dispatched) -> torch.Tensor:
        """Differentiable with respect to expert_y and to the topk_weights given to dispatch (when
        these need no gradient, the backward computes none and skips its read of expert_y). With
        weights_at_experts the rows are summed unweighted, and topk_weights' gradient comes
        through dispatch's backward instead (from d.expert_weights'), so the backward reads no y.
        expert_y's gradient, in the rows of no expert: 0 where an expert's GEMM reads them
        (padded: past each expert's count; packed: a segment's alignment padding); packed rows
        past the last segment, which no expert reads, are undefined, as in expert_x. After a
        differentiable dispatch the output needs a gradient too, whatever expert_y is made of: the
        backward then runs both rounds on every rank, in the same order (below)."""
        engine = self._check_round(dispatched._round, "combine")
        r = dispatched._route
        # A differentiable dispatch's expert_x goes in too: both backward rounds are collective, and
        # autograd calls dispatch's backward only where a gradient path reaches expert_x. A rank
        # whose experts made expert_y without reading it (none of its experts got a row, say) would
        # skip that round and run the next layer's backward of combine while its peers wait in the
        # backward of dispatch. Through this edge every rank that runs combine's backward runs
        # dispatch's right after its experts' (a zero gradient where they gave none).
        expert_x = dispatched.expert_x if _needs_grad(dispatched.expert_x) else None
        if _needs_grad(expert_y, dispatched._topk_weights, expert_x):
            out = _CombineFunction.apply(
                engine,
                self._state,
                expert_y,
                dispatched._topk_weights,
                expert_x,
                self._combine_weights(dispatched),
                dispatched.expert_offsets,
                dispatched.expert_num_tokens,
                *r,
            )
        else:
            out = _combine_round(engine, self._state, expert_y, self._combine_weights(dispatched), r)
        self._open[self._buffer(dispatched._round)] = None
        return out

    def _dispatched(self, round_: int, out: _DispatchOutputs, dest_mask: torch.Tensor, topk_weights) -> Dispatched:
        """The one place a Dispatched is built."""
        return Dispatched(
            expert_x=out.expert_x,
            expert_num_tokens=out.expert_num_tokens,
            expert_offsets=out.expert_offsets,
            expert_meta=out.expert_meta,
            expert_weights=out.expert_weights,
            expert_x_scale=out.expert_x_scale if self.dispatch_dtype is not None else None,
            num_tokens=int(dest_mask.shape[0]),
            _round=round_,
            _route=out.route(dest_mask),
            _topk_weights=topk_weights,
        )

    def _combine_weights(self, dispatched: Dispatched) -> Optional[torch.Tensor]:
        """The weights combine applies to the rows: none where the experts applied them."""
        return None if self.weights_at_experts else dispatched.expert_weights

    @staticmethod
    def _no_grad_in_split_calls(call: str, *tensors):
        if _needs_grad(*tensors):
            raise RuntimeError(
                f"moe_a2a: {call} is not differentiable and an input requires grad; use "
                "dispatch()/combine() for training, or call it under torch.no_grad()"
            )

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
        """Raises if the device reported an error; does not synchronise, so it may raise while the
        round still runs. Where this rank found an error of its own, that is the one raised, never
        a peer's report of the error bit it sent them (docs/design/protocol.md, "Errors travel in
        signals"); one the device is still writing is waited for, up to a second, without the GIL.
        Like every call, from the one thread that drives this AllToAll."""
        self._check_open()
        for engine in self._engines:
            ext().engine_check(engine)

    def synchronize(self) -> None:
        """Waits for this rank's work on the current stream, then raises any device error."""
        self._check_open()
        torch.cuda.current_stream(self.device).synchronize()
        for engine in self._engines:
            ext().engine_check(engine)

    @property
    def group(self):
        """The process group (raises once it has been destroyed: AllToAll holds it weakly)."""
        return self._group.get()

    def close(self, timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Frees this rank's buffers. Every rank must close, but close() needs no process
        group (it works after destroy_process_group, and runs by itself when the AllToAll is
        garbage collected or at interpreter exit): see SymmetricHeap.close for the handshake
        over the heap, the bounded wait and the warning when a peer is gone. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        _close_engines(self._engines, self.heap, float(timeout_s))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self):
        if self._closed:
            raise RuntimeError("moe_a2a: AllToAll used after close()")

    def _check_round(self, round_: int, call: str) -> int:
        """The engine of round `round_`, which must be dispatched and not yet combined."""
        self._check_open()
        if round_ < 1 or self._open[self._buffer(round_)] != round_:
            for engine in self._engines:  # an engine that failed says so first
                ext().engine_check(engine)
            if round_ < 1 or round_ > self._round:
                why = "which this AllToAll never dispatched"
            elif round_ <= self._round - self.num_buffers:
                why = f"whose buffer was reused by a later dispatch (the latest is #{self._round})"
            else:
                why = "which was already combined"
            raise RuntimeError(f"moe_a2a: {call} was given the result of dispatch #{round_}, {why}")
        return self._engines[self._buffer(round_)]
