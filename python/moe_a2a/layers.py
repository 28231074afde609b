"""An expert-parallel SwiGLU Mixture-of-Experts layer built on moe_a2a.AllToAll.

    from moe_a2a.layers import ExpertParallelMoE
    moe = ExpertParallelMoE(hidden_dim=7168, ffn_dim=2048, num_experts=256, experts_per_token=8,
                            max_num_tokens=512)           # collective: every rank, same arguments
    out = moe(x)                                          # x [T, H] -> [T, H]; T may differ per rank
    out.float().square().mean().backward()                # every rank runs backward: collective too
    moe.all_reduce_router_grad()                          # router_weight is replicated (data parallel)
    moe.close()

Every rank owns num_experts / world experts (global expert e = rank * E_local + local e) and a
copy of the router. forward = route (moe_a2a.dense_moe.route, fp32) -> dispatch -> the local
experts' SwiGLU MLPs (expert_swiglu) -> combine. dispatch and combine are differentiable, so
backward sends gradients back along the same paths; expert weight gradients are complete on
their owner (they sum every rank's tokens), the router gradient is per rank and must be summed
over ranks like any data-parallel parameter.

``expert_swiglu`` runs the local experts on dispatch's output in either layout; it is also
usable on its own with the functional API (ep.dispatch / ep.combine).

This module imports without the compiled extension: AllToAll is imported when a layer is built.
"""

from __future__ import annotations

import math
import warnings
from typing import Iterable, Optional, Tuple

import torch
import torch.nn as nn

from . import grouped_gemv as gemv
from ._collective import GroupRef
from .dense_moe import check_expert_weights, route
from .reference import dequantize_fp8
from .swiglu import expert_row_mask, swiglu

__all__ = [
    "LAYOUTS",
    "LAYER_DTYPES",
    "expert_row_mask",
    "expert_swiglu",
    "init_weights",
    "ExpertParallelMoE",
]

LAYOUTS = ("packed", "padded")
LAYER_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_IMPLS = ("auto", "grouped_mm", "loop", "bmm")
# (device, dtype) where torch._grouped_mm raised: "auto" uses the loop there from then on.
_GROUPED_MM_FAILED = {}


# --------------------------------------------------------------------------- local experts


def _expert_mlp(xe, w_gate, w_up, w_down, row_weights=None):
    return swiglu(xe @ w_gate, xe @ w_up, row_weights) @ w_down


def _swiglu_grouped_mm(x, expert_offsets, expert_num_tokens, w_gate, w_up, w_down, row_weights=None):
    # offs = the cumulative group ends. grouped_mm reads and writes only rows < offs[-1] and
    # its weight gradients sum only over each group's rows, so the undefined rows past the
    # last expert (possibly NaN) never reach a weight gradient. Their outputs (and the
    # gradient rows grouped_mm's backward gives them) stay undefined, like expert_x's.
    offs = expert_offsets[1:]
    if offs.dtype != torch.int32:
        offs = offs.to(torch.int32)
    gate = torch._grouped_mm(x, w_gate, offs=offs)
    up = torch._grouped_mm(x, w_up, offs=offs)
    # rows of no expert: zeros, not computed (half of the buffer at its default capacity)
    h = swiglu(gate, up, row_weights, expert_offsets, expert_num_tokens)
    return torch._grouped_mm(h, w_down, offs=offs)


def _swiglu_grouped_gemv(x, expert_offsets, expert_num_tokens, w_gate, w_up, w_down, rows_per_expert, row_weights=None):
    # moe_a2a.grouped_gemv on the weights' transposes ([E, F, H] and [E, H, F] views, contiguous
    # along their output): each active expert's weights read once. Rows of no expert: undefined.
    p = gemv.rows_per_pass(rows_per_expert)
    gate = gemv.grouped_gemv(x, w_gate.transpose(1, 2), expert_offsets, expert_num_tokens, p)
    up = gemv.grouped_gemv(x, w_up.transpose(1, 2), expert_offsets, expert_num_tokens, p)
    h = swiglu(gate, up, row_weights, expert_offsets, expert_num_tokens)
    return gemv.grouped_gemv(h, w_down.transpose(1, 2), expert_offsets, expert_num_tokens, p)


def _swiglu_loop(x, expert_offsets, expert_num_tokens, w_gate, w_up, w_down, row_weights=None):
    # One host sync for all offsets and counts, then plain matmuls on each expert's slice.
    # Only slices of valid rows enter a matmul, so garbage rows reach neither an output nor a
    # gradient; rows of no expert are written as zeros.
    E, H = w_gate.shape[0], x.shape[-1]
    flat = x.reshape(-1, H)
    R = flat.shape[0]
    meta = torch.cat([expert_offsets[:E].long(), expert_num_tokens.long()]).tolist()
    starts, counts = meta[:E], meta[E:]
    pieces, pos = [], 0
    for e in sorted(range(E), key=lambda i: starts[i]):
        s, n = starts[e], counts[e]
        if n < 0 or s < 0 or s + n > R or (n > 0 and s < pos):
            raise ValueError(
                f"expert_swiglu: local expert {e} has rows [{s}, {s + n}), which is outside the "
                f"{R} rows of expert_x or overlaps the previous expert (ends at row {pos})"
            )
        rw = None if row_weights is None else row_weights[s : s + max(n, 0)]
        if n == 0:  # keeps the expert in the graph: its weight gradient is a defined zero
            pieces.append(_expert_mlp(flat[:0], w_gate[e], w_up[e], w_down[e], None if rw is None else rw[:0]))
            continue
        if s > pos:
            pieces.append(flat.new_zeros(s - pos, H))
        pieces.append(_expert_mlp(flat[s : s + n], w_gate[e], w_up[e], w_down[e], rw))
        pos = s + n
    if pos < R:
        pieces.append(flat.new_zeros(R - pos, H))
    return torch.cat(pieces).reshape(x.shape)


def _swiglu_padded_bmm(x, expert_offsets, expert_num_tokens, w_gate, w_up, w_down, row_weights=None):
    # Rows past num_tokens[e] are garbage that may hold NaN bit patterns. torch.where
    # replaces them (a multiply by a 0/1 mask would keep NaN * 0 = NaN, and bmm's weight
    # gradient x^T @ dy would then be NaN). The where on the output keeps those rows zero
    # and gives them a zero gradient, whatever combine's backward sends there.
    E, cap, _ = x.shape
    valid = (torch.arange(cap, device=x.device) < expert_num_tokens.long()[:, None]).unsqueeze(-1)
    xm = torch.where(valid, x, 0.0)
    h = swiglu(torch.bmm(xm, w_gate), torch.bmm(xm, w_up), row_weights, expert_offsets, expert_num_tokens)
    return torch.where(valid, torch.bmm(h, w_down), 0.0)


def _grouped_mm_expected(x: torch.Tensor) -> bool:
    """Whether "auto" tries torch._grouped_mm: bf16 on a CUDA / ROCm device of compute
    capability >= 9.0 (H100 and later; MI300 reports 9.4), unless it failed there before."""
    if not hasattr(torch, "_grouped_mm") or x.device.type != "cuda" or x.dtype != torch.bfloat16:
        return False
    if (str(x.device), x.dtype) in _GROUPED_MM_FAILED:
        return False
    return torch.cuda.get_device_capability(x.device) >= (9, 0)


def expert_swiglu(
    expert_x: torch.Tensor,
    expert_offsets: torch.Tensor,
    expert_num_tokens: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    layout: str,
    *,
    impl: str = "auto",
    rows_per_expert: float = math.inf,
    row_weights: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The local experts' SwiGLU MLPs on dispatch's output:
    y = (silu(x @ w_gate[e]) * (x @ w_up[e])) @ w_down[e] for the rows of each local expert e.

    expert_x: packed [rows, H] or padded [E_local, capacity, H] (d.expert_x);
    expert_offsets [E_local + 1], expert_num_tokens [E_local] (int32, on the device);
    w_gate, w_up [E_local, H, F], w_down [E_local, F, H], in expert_x's dtype.
    Returns expert_x's shape and dtype, ready for ep.combine. Differentiable w.r.t. expert_x
    and the weights; rows of no expert never make a weight gradient NaN.

    row_weights (an AllToAll with weights_at_experts: d.expert_weights, [..rows..] float32):
    each row's router weight, applied to its hidden activation, y = (w * h) @ w_down, h =
    silu(x @ w_gate) * (x @ w_up); differentiable. Its values in rows of no expert are ignored
    (taken as 0). The activation, weighted or not, is moe_a2a.swiglu: one kernel each way on a
    GPU, the products in float32 and each output rounded once.

    impl: "auto" (default) picks by layout and device:
      packed -> "grouped_mm" (torch._grouped_mm with offs = expert_offsets[1:]) for bf16 on
                CUDA compute capability >= 9.0, falling back to "loop" if it raises; else "loop"
                (one host sync to read offsets / counts, then a matmul per expert's slice).
                Rows of no expert: zeros with "loop"; undefined with "grouped_mm", and so is the
                gradient it returns for those rows of expert_x (dispatch's backward reads only
                rows of an expert, as combine reads only those of the output).
                Where no gradient is asked for and the local experts get at most
                moe_a2a.grouped_gemv.ROWS_PER_EXPERT_LIMIT rows each on average
                (rows_per_expert: the AllToAll's max_num_tokens x top-k / local experts, a
                decode step's), moe_a2a.grouped_gemv first (rows of no expert undefined).
      padded -> "bmm" (torch.where-masked batched matmuls; rows of no expert are zeros).
    Packed, the activation skips the rows past the last expert; the padded bmm and its activation
    run over every row of expert_x, used or not, so size the AllToAll's capacity to the expected
    load.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"expert_swiglu: layout must be one of {LAYOUTS}, got {layout!r}")
    if impl not in _IMPLS:
        raise ValueError(f"expert_swiglu: impl must be one of {_IMPLS}, got {impl!r}")
    want_dim = 2 if layout == "packed" else 3
    if expert_x.dim() != want_dim:
        shape = "[rows, H]" if layout == "packed" else "[E_local, capacity, H]"
        raise ValueError(f"expert_swiglu: {layout} expert_x must be {shape}, got shape {tuple(expert_x.shape)}")
    E, _ = check_expert_weights(w_gate, w_up, w_down, int(expert_x.shape[-1]))
    if layout == "padded" and expert_x.shape[0] != E:
        raise ValueError(f"expert_swiglu: padded expert_x has {expert_x.shape[0]} experts, the weights {E}")
    if tuple(expert_num_tokens.shape) != (E,):
        raise ValueError(f"expert_swiglu: expert_num_tokens must be [{E}], got shape {tuple(expert_num_tokens.shape)}")
    if tuple(expert_offsets.shape) != (E + 1,):
        raise ValueError(f"expert_swiglu: expert_offsets must be [{E + 1}], got shape {tuple(expert_offsets.shape)}")
    if expert_x.dtype != w_gate.dtype:
        raise TypeError(f"expert_swiglu: expert_x is {expert_x.dtype} but the expert weights are {w_gate.dtype}")
    if impl == "grouped_mm" and layout != "packed":
        raise ValueError("expert_swiglu: impl='grouped_mm' needs the packed layout")
    if impl == "bmm" and layout != "padded":
        raise ValueError("expert_swiglu: impl='bmm' needs the padded layout")
    if row_weights is not None:
        if tuple(row_weights.shape) != tuple(expert_x.shape[:-1]) or row_weights.dtype != torch.float32:
            raise ValueError(
                f"expert_swiglu: row_weights must be float32 {list(expert_x.shape[:-1])} (d.expert_weights), "
                f"got {row_weights.dtype} {list(row_weights.shape)}"
            )
        # Rows of no expert hold undefined weights (NaN bits, maybe): swiglu leaves them out (or a
        # NaN times an alignment row's 0 would reach w_down's gradient).

    if impl == "auto":
        if layout == "padded":
            impl = "bmm"
        elif all(gemv.applies(expert_x, w.transpose(1, 2), rows_per_expert) for w in (w_gate, w_up, w_down)):
            return _swiglu_grouped_gemv(expert_x, expert_offsets, expert_num_tokens, w_gate, w_up, w_down,
                                        rows_per_expert, row_weights)  # fmt: skip
        elif _grouped_mm_expected(expert_x):
            try:
                return _swiglu_grouped_mm(
                    expert_x, expert_offsets, expert_num_tokens, w_gate, w_up, w_down, row_weights
                )
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, NotImplementedError) as e:
                _GROUPED_MM_FAILED[(str(expert_x.device), expert_x.dtype)] = str(e)
                warnings.warn(
                    f"expert_swiglu: torch._grouped_mm failed on {expert_x.device} for {expert_x.dtype} "
                    f"({type(e).__name__}: {e}); using one matmul per expert from now on",
                    stacklevel=2,
                )
                impl = "loop"
        else:
            impl = "loop"
    if impl == "grouped_mm":
        return _swiglu_grouped_mm(expert_x, expert_offsets, expert_num_tokens, w_gate, w_up, w_down, row_weights)
    if impl == "bmm":
        return _swiglu_padded_bmm(expert_x, expert_offsets, expert_num_tokens, w_gate, w_up, w_down, row_weights)
    return _swiglu_loop(expert_x, expert_offsets, expert_num_tokens, w_gate, w_up, w_down, row_weights)


# --------------------------------------------------------------------------- weights


def _stream_seed(seed: int, stream: int) -> int:
    # One CPU generator stream per (seed, tensor): any rank can draw any expert's weights
    # without drawing the others, and a rank's values do not depend on the world size.
    return (int(seed) * 1_000_003 + int(stream)) & ((1 << 63) - 1)


def _draw(shape, std, seed, stream):
    gen = torch.Generator(device="cpu")
    gen.manual_seed(_stream_seed(seed, stream))
    return torch.randn(shape, generator=gen) * std


def init_weights(
    hidden_dim: int,
    ffn_dim: int,
    num_experts: int,
    seed: int,
    dtype: torch.dtype,
    device,
    experts: Optional[Iterable[int]] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(router_weight fp32 [E, H], w_gate [n, H, F], w_up [n, H, F], w_down [n, F, H]) for the
    global experts ``experts`` (default: all E), drawn N(0, 1/fan_in) on the CPU from ``seed``:
    expert e's values are the same whichever subset is drawn, on every rank and device."""
    experts = list(range(num_experts)) if experts is None else [int(e) for e in experts]
    bad = [e for e in experts if not 0 <= e < num_experts]
    if bad:
        raise ValueError(f"init_weights: expert ids {bad} outside [0, {num_experts})")
    H, Fd = int(hidden_dim), int(ffn_dim)
    router = _draw((num_experts, H), 1.0 / math.sqrt(H), seed, 0).to(device)
    w_gate = torch.empty(len(experts), H, Fd, dtype=dtype, device=device)
    w_up = torch.empty(len(experts), H, Fd, dtype=dtype, device=device)
    w_down = torch.empty(len(experts), Fd, H, dtype=dtype, device=device)
    for i, e in enumerate(experts):  # one expert at a time keeps the fp32 CPU copy small
        w_gate[i].copy_(_draw((H, Fd), 1.0 / math.sqrt(H), seed, 3 * e + 1).to(dtype))
        w_up[i].copy_(_draw((H, Fd), 1.0 / math.sqrt(H), seed, 3 * e + 2).to(dtype))
        w_down[i].copy_(_draw((Fd, H), 1.0 / math.sqrt(Fd), seed, 3 * e + 3).to(dtype))
    return router, w_gate, w_up, w_down


# --------------------------------------------------------------------------- the layer


def _with_index(device: torch.device) -> torch.device:
    # "cuda" means the current GPU; spelled out so it compares equal to a tensor's device.
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class ExpertParallelMoE(nn.Module):
    """SwiGLU MoE layer whose experts are spread over the ranks of a process group.

    Parameters (this rank's share; state_dict holds only these):
      router_weight [E, H] float32, replicated: every rank holds the same values, and its
          gradient is this rank's tokens' part only; sum it over ranks (all_reduce_router_grad)
          before the optimizer step, like any data-parallel parameter. Kept in fp32 whatever
          ``dtype`` is: its logits pick discrete experts.
      w_gate, w_up [E_local, H, F], w_down [E_local, F, H] in ``dtype``: global experts
          rank * E_local ... rank * E_local + E_local - 1. Their gradients are complete (every
          rank's tokens) after backward; no reduction needed.

    The layer owns one AllToAll (collective to build and to close; use close() or ``with``).
    forward and backward are collective: every rank calls them the same number of times.
    Do not move the module to another device: the AllToAll's buffers stay where they are.

    dispatch_dtype=torch.float8_e4m3fn (or float8_e4m3fnuz) moves the tokens to the experts as fp8
    with 1x128 block scales (AllToAll(dispatch_dtype=)): half the bytes of bf16. The experts
    dequantize them (q * scale, into ``dtype``) and run the same GEMMs as without: torch 2.11's
    scaled grouped GEMM (torch._scaled_grouped_mm) takes row-wise scales on sm90, not the 1x128
    blocks a DeepSeek-V3-style fp8 GEMM reads, so a fused fp8 expert kernel is the caller's to
    plug in (d.expert_x, d.expert_x_scale). fp8 dispatch is forward-only with respect to x (the
    expert weights still get gradients).

    weights_at_experts=True applies the router weights in the experts, to each row's hidden
    activation, and combines unweighted (AllToAll(weights_at_experts=)): in training the router's
    gradient then comes from the experts' own backward, over the F-wide activation, and the
    backward of combine reads no expert output. The same values, rounded differently.

    profile=True builds the layer's AllToAll with the in-kernel profiler on (AllToAll(profile=):
    a build with MOE_A2A_PROFILE=1); ``moe_a2a.trace.save(path, layer.ep)`` then writes the
    forward and backward rounds' timelines.

    init_seed: weights are drawn on the CPU from this seed, expert by expert, so they equal
    ``init_full_weights(..., seed=init_seed)`` sliced to this rank (tests build the dense
    model from that). None draws on the device from torch's default generator instead:
    fast, not reproducible, for benchmarks.
    """

    def __init__(
        self,
        hidden_dim: int,
        ffn_dim: int,
        num_experts: int,
        experts_per_token: int,
        max_num_tokens: int,
        *,
        group=None,
        dtype: torch.dtype = torch.bfloat16,
        normalize_topk: bool = True,
        layout: str = "packed",
        max_recv_tokens: Optional[int] = None,
        max_recv_tokens_per_expert: Optional[int] = None,
        device=None,
        init_seed: Optional[int] = 0,
        timeout_s: float = 5.0,
        dispatch_dtype: Optional[torch.dtype] = None,
        profile: bool = False,
        weights_at_experts: bool = False,
    ):
        super().__init__()
        import torch.distributed as dist

        for name, v in (
            ("hidden_dim", hidden_dim),
            ("ffn_dim", ffn_dim),
            ("num_experts", num_experts),
            ("experts_per_token", experts_per_token),
            ("max_num_tokens", max_num_tokens),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"ExpertParallelMoE: {name} must be a positive int, got {v!r}")
        if experts_per_token > num_experts:
            raise ValueError(
                f"ExpertParallelMoE: experts_per_token ({experts_per_token}) > num_experts ({num_experts})"
            )
        if layout not in LAYOUTS:
            raise ValueError(f"ExpertParallelMoE: layout must be one of {LAYOUTS}, got {layout!r}")
        if dtype not in LAYER_DTYPES:
            raise TypeError(f"ExpertParallelMoE: dtype must be one of {LAYER_DTYPES}, got {dtype}")
        if layout == "packed" and max_recv_tokens_per_expert is not None:
            raise ValueError(
                "ExpertParallelMoE: max_recv_tokens_per_expert is for layout='padded'; "
                "the packed layout takes max_recv_tokens"
            )
        if layout == "padded" and max_recv_tokens is not None:
            raise ValueError(
                "ExpertParallelMoE: max_recv_tokens is for layout='packed'; "
                "the padded layout takes max_recv_tokens_per_expert"
            )
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "ExpertParallelMoE needs torch.distributed initialised "
                "(launch with torchrun and call dist.init_process_group first)"
            )
        group = group if group is not None else dist.group.WORLD
        self._group = GroupRef(group, "ExpertParallelMoE")  # held weakly, like AllToAll's
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        if num_experts % self.world != 0:
            raise ValueError(
                f"ExpertParallelMoE: num_experts ({num_experts}) must be divisible by the "
                f"group's world size ({self.world})"
            )
        self.hidden_dim, self.ffn_dim = hidden_dim, ffn_dim
        self.num_experts, self.experts_per_token = num_experts, experts_per_token
        self.num_local_experts = num_experts // self.world
        self.max_num_tokens = max_num_tokens
        self.dtype, self.layout = dtype, layout
        self.normalize_topk = bool(normalize_topk)

        from .all_to_all import AllToAll  # loads the compiled extension

        extra = {}
        if max_recv_tokens is not None:
            extra["max_recv_tokens"] = int(max_recv_tokens)
        if max_recv_tokens_per_expert is not None:
            extra["max_recv_tokens_per_expert"] = int(max_recv_tokens_per_expert)
        if device is not None:
            extra["device"] = _with_index(torch.device(device))
        if profile:
            extra["profile"] = True
        if weights_at_experts:
            extra["weights_at_experts"] = True
        self.ep = AllToAll(
            group,
            num_experts,
            experts_per_token,
            hidden_dim,
            max_num_tokens,
            dtype,
            layout=layout,
            timeout_s=timeout_s,
            dispatch_dtype=dispatch_dtype,
            **extra,
        )
        self.dispatch_dtype = dispatch_dtype
        self.device = _with_index(torch.device(self.ep.device))

        first = self.rank * self.num_local_experts
        local = range(first, first + self.num_local_experts)
        if init_seed is None:
            router, w_gate, w_up, w_down = self._device_random_weights()
        else:
            router, w_gate, w_up, w_down = init_weights(
                hidden_dim, ffn_dim, num_experts, init_seed, dtype, self.device, local
            )
        self.router_weight = nn.Parameter(router)
        self.w_gate = nn.Parameter(w_gate)
        self.w_up = nn.Parameter(w_up)
        self.w_down = nn.Parameter(w_down)

    # ---- weights ----
    @staticmethod
    def init_full_weights(
        hidden_dim: int, ffn_dim: int, num_experts: int, seed: int, dtype: torch.dtype, device
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(router_weight fp32 [E, H], w_gate_all, w_up_all [E, H, F], w_down_all [E, F, H]) for
        ALL experts: what every rank's ExpertParallelMoE(init_seed=seed) holds, before slicing."""
        return init_weights(hidden_dim, ffn_dim, num_experts, seed, dtype, device)

    @property
    def expert_range(self) -> range:
        """Global ids of this rank's experts."""
        first = self.rank * self.num_local_experts
        return range(first, first + self.num_local_experts)

    def load_full_weights(
        self, router_weight: torch.Tensor, w_gate_all: torch.Tensor, w_up_all: torch.Tensor, w_down_all: torch.Tensor
    ) -> None:
        """Copies the router and this rank's slice of all-expert weights in (any dtype / device)."""
        E, H, Fd = self.num_experts, self.hidden_dim, self.ffn_dim
        for name, t, shape in (
            ("router_weight", router_weight, (E, H)),
            ("w_gate_all", w_gate_all, (E, H, Fd)),
            ("w_up_all", w_up_all, (E, H, Fd)),
            ("w_down_all", w_down_all, (E, Fd, H)),
        ):
            if tuple(t.shape) != shape:
                raise ValueError(f"load_full_weights: {name} must be {list(shape)}, got {list(t.shape)}")
        lo, hi = self.expert_range.start, self.expert_range.stop
        with torch.no_grad():
            self.router_weight.copy_(router_weight)
            self.w_gate.copy_(w_gate_all[lo:hi])
            self.w_up.copy_(w_up_all[lo:hi])
            self.w_down.copy_(w_down_all[lo:hi])

    def _device_random_weights(self):
        E, El, H, Fd = self.num_experts, self.num_local_experts, self.hidden_dim, self.ffn_dim
        kw = {"dtype": self.dtype, "device": self.device}
        router = torch.randn(E, H, device=self.device) / math.sqrt(H)
        return (
            router,
            torch.empty(El, H, Fd, **kw).normal_(0.0, 1.0 / math.sqrt(H)),
            torch.empty(El, H, Fd, **kw).normal_(0.0, 1.0 / math.sqrt(H)),
            torch.empty(El, Fd, H, **kw).normal_(0.0, 1.0 / math.sqrt(Fd)),
        )

    def all_reduce_router_grad(self, average: bool = False) -> None:
        """Collective: sums router_weight.grad over the group (the gradient of the sum of the
        ranks' losses); average=True divides by the world size instead (mean of the losses)."""
        import torch.distributed as dist

        if self.router_weight.grad is None:  # still take part: the others are in the all_reduce
            self.router_weight.grad = torch.zeros_like(self.router_weight)
        dist.all_reduce(self.router_weight.grad, op=dist.ReduceOp.SUM, group=self.group)
        if average:
            self.router_weight.grad.div_(self.world)

    # ---- forward ----
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.hidden_dim:
            raise ValueError(
                f"ExpertParallelMoE: x must be [T, hidden_dim={self.hidden_dim}], got shape {tuple(x.shape)}"
            )
        if x.dtype != self.dtype:
            raise TypeError(f"ExpertParallelMoE: x must be {self.dtype} (the layer's dtype), got {x.dtype}")
        if x.shape[0] > self.max_num_tokens:
            raise ValueError(
                f"ExpertParallelMoE: x has {x.shape[0]} tokens, more than max_num_tokens={self.max_num_tokens}"
            )
        if x.device != self.device:
            raise ValueError(f"ExpertParallelMoE: x is on {x.device}, the layer on {self.device}")
        topk_idx, topk_weights = route(x, self.router_weight, self.experts_per_token, self.normalize_topk)
        d = self.ep.dispatch(x, topk_idx, topk_weights)
        rows = d.expert_x if d.expert_x_scale is None else dequantize_fp8(d.expert_x, d.expert_x_scale, self.dtype)
        rows_per_expert = self.max_num_tokens * self.experts_per_token / self.w_gate.shape[0]
        row_weights = d.expert_weights if self.ep.weights_at_experts else None
        y = expert_swiglu(rows, d.expert_offsets, d.expert_num_tokens, self.w_gate, self.w_up, self.w_down, self.layout,
                          rows_per_expert=rows_per_expert, row_weights=row_weights)  # fmt: skip
        return self.ep.combine(y, d)

    # ---- lifetime ----
    @property
    def group(self):
        """The process group (raises once it has been destroyed: the layer holds it weakly)."""
        return self._group.get()

    def close(self) -> None:
        """Frees the AllToAll's buffers (every rank must, but no process group is needed: see
        AllToAll.close); the layer is unusable afterwards."""
        self.ep.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def extra_repr(self) -> str:
        return (
            f"hidden_dim={self.hidden_dim}, ffn_dim={self.ffn_dim}, num_experts={self.num_experts}, "
            f"experts_per_token={self.experts_per_token}, local experts {self.expert_range.start}.."
            f"{self.expert_range.stop - 1} on rank {self.rank}/{self.world}, layout={self.layout}, "
            f"dtype={self.dtype}"
            + (f", dispatch_dtype={self.dispatch_dtype}" if self.dispatch_dtype else "")
            + (", weights_at_experts=True" if self.ep.weights_at_experts else "")
        )
