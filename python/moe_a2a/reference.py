"""Pure-torch reference of the MoE all-to-all semantics (AMD challenge, all2all problem).

This module is the ground truth the library is tested against. It needs only torch
(never the compiled extension ``moe_a2a._C``) and works on CPU or GPU tensors.

Semantics, for ``world`` ranks and ``num_experts`` experts owned in contiguous blocks
(global expert ``e`` lives on rank ``e // (num_experts // world)`` as local expert
``e % (num_experts // world)``):

* every rank ``s`` holds ``x`` [T_s, H] (fp16/bf16), ``topk_idx`` [T_s, topk] (int32 or
  int64, distinct experts per token; -1 marks an unused slot, which is neither dispatched
  nor combined) and ``topk_weights`` [T_s, topk] fp32;
* **dispatch** delivers to each local expert every (token, k) pair that chose it, with
  metadata (global_expert, src_rank, src_token, k). Token order inside an expert is free
  in the library; the reference sorts it canonically by (src_rank, src_token, k);
* the **fake grouped GEMM** on rank ``r`` is ``y = (x.float() * (1 + r)).to(x.dtype)``;
* **combine** returns, for each source token, ``sum_k w[t, k] * y[t, k].float()``
  accumulated in fp32 in the order k = 0..topk-1 and cast to ``x.dtype``.

Every computational function has a ``*_loop`` twin written token by token; the loop
versions exist only so tests can check the vectorised ones against an obviously
correct spelling.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional, Sequence, Union

import torch

from .fp8_formats import FP8_AMAX_FLOOR, FP8_BLOCK, FP8_FORMATS

# A topk_idx entry that marks an unused slot.
MASKED_SLOT = -1

__all__ = [
    "Routing",
    "DispatchedTokens",
    "REFERENCE_META_COLUMNS",
    "LIBRARY_META_COLUMNS",
    "experts_per_rank",
    "owner_rank",
    "local_expert",
    "generate_rank_inputs",
    "generate_all_inputs",
    "dispatch_reference",
    "dispatch_reference_loop",
    "fake_grouped_gemm_reference",
    "fake_grouped_gemm_reference_loop",
    "combine_pairs_reference",
    "combine_reference",
    "combine_reference_loop",
    "moe_reference",
    "moe_reference_loop",
    "moe_reference_all",
    "canonical_dispatch",
    "dispatch_mismatch",
    "assert_dispatch_matches",
]

# Columns of the reference's per-expert metadata.
REFERENCE_META_COLUMNS = ("global_expert", "src_rank", "src_token", "k")
# Columns of the library's padded dispatch metadata (the global expert is implied by the
# expert index, so the library does not store it).
LIBRARY_META_COLUMNS = ("src_rank", "src_token", "k")


class Routing(NamedTuple):
    """One rank's inputs. A NamedTuple so ``x, idx, w = routing`` keeps working."""

    x: torch.Tensor  # [T, H] fp16 / bf16 (fp32 also accepted)
    topk_idx: torch.Tensor  # [T, topk] int32 / int64, distinct experts per row
    topk_weights: torch.Tensor  # [T, topk] fp32

    @property
    def num_tokens(self) -> int:
        return int(self.x.shape[0])


@dataclasses.dataclass
class DispatchedTokens:
    """What one receiving rank holds after dispatch, one entry per local expert.

    ``meta[e]`` is int64 [n_e, len(meta_columns)]; rows are sorted by
    (src_rank, src_token, k), and ``tokens[e][i]`` is the token described by ``meta[e][i]``.
    The reference fills all four REFERENCE_META_COLUMNS; ``canonical_dispatch`` fills the
    three LIBRARY_META_COLUMNS. In both the last three columns are (src_rank, src_token, k).
    """

    rank: Optional[int]
    tokens: list  # list[torch.Tensor], each [n_e, H]
    meta: list  # list[torch.Tensor], each [n_e, 3 or 4] int64
    meta_columns: tuple

    @property
    def num_local_experts(self) -> int:
        return len(self.tokens)

    @property
    def num_tokens(self) -> list:
        """Tokens received per local expert, as Python ints."""
        return [int(t.shape[0]) for t in self.tokens]

    def pair_meta(self, e: int) -> torch.Tensor:
        """(src_rank, src_token, k) of local expert ``e``, whichever layout this is."""
        return self.meta[e][:, -3:]


# --------------------------------------------------------------------------- ownership


def experts_per_rank(num_experts: int, world: int) -> int:
    if world <= 0:
        raise ValueError(f"world must be positive, got {world}")
    if num_experts <= 0 or num_experts % world != 0:
        raise ValueError(f"num_experts ({num_experts}) must be a positive multiple of world ({world})")
    return num_experts // world


def owner_rank(expert, num_experts: int, world: int):
    """Rank owning global expert ``expert`` (an int or an integer tensor)."""
    return expert // experts_per_rank(num_experts, world)


def local_expert(expert, num_experts: int, world: int):
    """Index of global expert ``expert`` among its owner's experts."""
    return expert % experts_per_rank(num_experts, world)


# --------------------------------------------------------------------------- inputs


def _rank_seed(seed: int, rank: int) -> int:
    # One stream per (seed, rank): any rank can regenerate any other rank's data, and a
    # rank's data does not depend on the world size. The multiplier is a prime larger
    # than any rank count, so distinct (seed, rank) pairs get distinct seeds.
    return (int(seed) * 1_000_003 + int(rank)) & ((1 << 63) - 1)


def generate_rank_inputs(
    rank: int,
    world: int,
    num_experts: int,
    topk: int,
    hidden: int,
    max_num_tokens: int,
    dtype: torch.dtype = torch.float16,
    seed: int = 0,
    device: Union[str, torch.device] = "cpu",
    num_tokens: Optional[int] = None,
    index_dtype: torch.dtype = torch.int32,
) -> Routing:
    """Deterministic inputs of ``rank``: a function of (seed, rank) and the shape only.

    T is drawn uniformly in [1, max_num_tokens] unless ``num_tokens`` is given (0 allowed).
    Everything is drawn on the CPU with a private torch.Generator and then moved to
    ``device``, so every rank (and every device kind) sees identical values.
    """
    experts_per_rank(num_experts, world)
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside [0, {world})")
    if not 1 <= topk <= num_experts:
        raise ValueError(f"topk ({topk}) must be in [1, num_experts={num_experts}]")
    if hidden <= 0 or max_num_tokens <= 0:
        raise ValueError(f"hidden ({hidden}) and max_num_tokens ({max_num_tokens}) must be > 0")
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"dtype must be float16, bfloat16 or float32, got {dtype}")
    if index_dtype not in (torch.int32, torch.int64):
        raise ValueError(f"index_dtype must be int32 or int64, got {index_dtype}")

    gen = torch.Generator(device="cpu")
    gen.manual_seed(_rank_seed(seed, rank))
    # Always draw T so the rest of the stream does not depend on whether it was overridden.
    drawn = int(torch.randint(1, max_num_tokens + 1, (1,), generator=gen).item())
    T = drawn if num_tokens is None else int(num_tokens)
    if not 0 <= T <= max_num_tokens:
        raise ValueError(f"num_tokens ({T}) must be in [0, max_num_tokens={max_num_tokens}]")

    # top-k of i.i.d. scores = a uniformly random set of distinct experts in random order,
    # so k is not correlated with the expert id (as with the challenge's randperm).
    scores = torch.rand(T, num_experts, generator=gen)
    topk_idx = scores.topk(topk, dim=1).indices.to(index_dtype)
    # Positive weights summing to 1 per token, like a router's softmax.
    topk_weights = torch.softmax(torch.randn(T, topk, generator=gen), dim=1)
    # Standard normal values: |x| stays far below the fp16 limit even after the fake
    # GEMM's (1 + rank) scaling at world 8.
    x = torch.randn(T, hidden, generator=gen).to(dtype)
    return Routing(x.to(device), topk_idx.to(device), topk_weights.to(device))


def generate_all_inputs(
    world: int,
    num_experts: int,
    topk: int,
    hidden: int,
    max_num_tokens: int,
    dtype: torch.dtype = torch.float16,
    seed: int = 0,
    device: Union[str, torch.device] = "cpu",
    num_tokens: Union[None, int, Sequence[Optional[int]]] = None,
    index_dtype: torch.dtype = torch.int32,
) -> list:
    """``generate_rank_inputs`` for every rank. ``num_tokens``: None, one int, or one per rank."""
    if num_tokens is None or isinstance(num_tokens, int):
        per_rank = [num_tokens] * world
    else:
        per_rank = list(num_tokens)
        if len(per_rank) != world:
            raise ValueError(f"num_tokens has {len(per_rank)} entries for world {world}")
    return [
        generate_rank_inputs(
            r,
            world,
            num_experts,
            topk,
            hidden,
            max_num_tokens,
            dtype,
            seed,
            device,
            per_rank[r],
            index_dtype,
        )
        for r in range(world)
    ]


def _check_all_inputs(all_inputs: Sequence, num_experts: int, world: int) -> None:
    experts_per_rank(num_experts, world)
    if len(all_inputs) != world:
        raise ValueError(f"got inputs of {len(all_inputs)} ranks for world {world}")
    hidden = {int(inp.x.shape[1]) for inp in all_inputs}
    dtypes = {inp.x.dtype for inp in all_inputs}
    topks = {int(inp.topk_idx.shape[1]) for inp in all_inputs}
    if len(hidden) != 1 or len(dtypes) != 1 or len(topks) != 1:
        raise ValueError(f"ranks disagree on hidden {hidden}, dtype {dtypes} or topk {topks}")
    for r, inp in enumerate(all_inputs):
        T = inp.x.shape[0]
        if inp.topk_idx.shape[0] != T or inp.topk_weights.shape != inp.topk_idx.shape:
            raise ValueError(f"rank {r}: x, topk_idx and topk_weights disagree on T")
        if inp.topk_idx.numel() and (int(inp.topk_idx.min()) < MASKED_SLOT or int(inp.topk_idx.max()) >= num_experts):
            raise ValueError(f"rank {r}: expert id outside [0, {num_experts}) and not {MASKED_SLOT} (an unused slot)")


# --------------------------------------------------------------------------- dispatch


def dispatch_reference(all_inputs: Sequence, rank: int, num_experts: int, world: int) -> DispatchedTokens:
    """Tokens and (global_expert, src_rank, src_token, k) per local expert of ``rank``."""
    _check_all_inputs(all_inputs, num_experts, world)
    epr = experts_per_rank(num_experts, world)

    tokens, meta = [], []
    for s, inp in enumerate(all_inputs):
        idx = inp.topk_idx.long()
        K = idx.shape[1]
        flat = idx.reshape(-1)  # row-major, so pairs come out in (src_token, k) order
        pair = torch.nonzero((flat != MASKED_SLOT) & (flat // epr == rank)).squeeze(1)
        src_token, k = pair // K, pair % K
        tokens.append(inp.x.index_select(0, src_token))
        meta.append(torch.stack([flat[pair], torch.full_like(pair, s), src_token, k], dim=1))
    all_tokens, all_meta = torch.cat(tokens), torch.cat(meta)

    # Concatenation over s already gives (src_rank, src_token, k) order; a stable sort by
    # local expert groups the pairs without disturbing that order inside each expert.
    local = all_meta[:, 0] - rank * epr
    order = torch.sort(local, stable=True).indices
    counts = torch.bincount(local, minlength=epr).tolist()
    return DispatchedTokens(
        rank=rank,
        tokens=list(all_tokens[order].split(counts)),
        meta=list(all_meta[order].split(counts)),
        meta_columns=REFERENCE_META_COLUMNS,
    )


def dispatch_reference_loop(all_inputs: Sequence, rank: int, num_experts: int, world: int) -> DispatchedTokens:
    """Token-by-token spelling of ``dispatch_reference`` (tests only)."""
    _check_all_inputs(all_inputs, num_experts, world)
    epr = experts_per_rank(num_experts, world)
    hidden = int(all_inputs[0].x.shape[1])
    dtype, device = all_inputs[0].x.dtype, all_inputs[0].x.device
    rows = [[] for _ in range(epr)]
    metas = [[] for _ in range(epr)]
    for s, inp in enumerate(all_inputs):
        idx = inp.topk_idx.tolist()
        for t, experts in enumerate(idx):
            for k, e in enumerate(experts):
                if e != MASKED_SLOT and e // epr == rank:
                    rows[e % epr].append(inp.x[t])
                    metas[e % epr].append([e, s, t, k])
    tokens = [torch.stack(r) if r else torch.empty(0, hidden, dtype=dtype, device=device) for r in rows]
    meta = [torch.tensor(m, dtype=torch.int64, device=device).reshape(-1, 4) for m in metas]
    return DispatchedTokens(rank, tokens, meta, REFERENCE_META_COLUMNS)


# --------------------------------------------------------------------------- fake GEMM


def _fake_gemm(t: torch.Tensor, rank: int) -> torch.Tensor:
    # fp32 multiply then one rounding to the token dtype: what the challenge's
    # `x * (1 + rank)` on half tensors does element-wise.
    return (t.float() * (1 + rank)).to(t.dtype)


def fake_grouped_gemm_reference(tokens, rank: int):
    """The challenge's stand-in for the experts: tokens * (1 + rank), in the token dtype.

    ``tokens`` is one tensor (e.g. the padded [E_local, cap, H] layout) or a list of
    per-expert tensors; the result has the same form.
    """
    if isinstance(tokens, torch.Tensor):
        return _fake_gemm(tokens, rank)
    return [_fake_gemm(t, rank) for t in tokens]


def fake_grouped_gemm_reference_loop(tokens, rank: int):
    """Row-by-row spelling of ``fake_grouped_gemm_reference`` (tests only)."""

    def one(t: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(t)
        flat_in, flat_out = t.reshape(-1, t.shape[-1]), out.reshape(-1, t.shape[-1])
        for i in range(flat_in.shape[0]):
            flat_out[i] = (flat_in[i].float() * float(1 + rank)).to(t.dtype)
        return out

    if isinstance(tokens, torch.Tensor):
        return one(tokens)
    return [one(t) for t in tokens]


# --------------------------------------------------------------------------- combine


def combine_pairs_reference(
    y_pairs: torch.Tensor, topk_weights: torch.Tensor, out_dtype: Optional[torch.dtype] = None
) -> torch.Tensor:
    """out[t] = sum_k w[t, k] * y_pairs[t, k].float(), in fp32, k ascending, then cast.

    ``y_pairs`` [T, topk, H] is the expert output of each (token, k) pair. The fixed
    order and separate multiply/add keep the result bitwise reproducible.
    """
    T, K, H = y_pairs.shape
    if tuple(topk_weights.shape) != (T, K):
        raise ValueError(f"topk_weights {tuple(topk_weights.shape)} vs y_pairs {(T, K, H)}")
    out_dtype = y_pairs.dtype if out_dtype is None else out_dtype
    acc = torch.zeros(T, H, dtype=torch.float32, device=y_pairs.device)
    w = topk_weights.float()
    for k in range(K):
        acc += w[:, k : k + 1] * y_pairs[:, k].float()
    return acc.to(out_dtype)


def _gather_pairs(expert_y_per_rank, expert_meta_per_rank, src_rank, T, K):
    """Collect, from every receiving rank, the outputs of ``src_rank``'s (token, k) pairs
    as a [T, K, H] tensor; checks each pair arrives exactly once."""
    ys, pos = [], []
    for ys_r, metas_r in zip(expert_y_per_rank, expert_meta_per_rank, strict=True):
        for y_e, m_e in zip(ys_r, metas_r, strict=True):
            m = m_e[:, -3:].long()  # (src_rank, src_token, k), 3- or 4-column metadata
            mine = m[:, 0] == src_rank
            ys.append(y_e[mine])
            pos.append(m[mine, 1] * K + m[mine, 2])
    if not ys:
        raise ValueError("no expert outputs given")
    y, pos = torch.cat(ys), torch.cat(pos)
    if pos.numel() != T * K or (
        pos.numel() and (torch.unique(pos).numel() != T * K or int(pos.min()) < 0 or int(pos.max()) >= T * K)
    ):
        raise ValueError(
            f"rank {src_rank}: expected each of its {T}x{K} (token, k) pairs exactly once, got {pos.numel()} pairs"
        )
    H = y.shape[-1]
    y_pairs = y.new_empty(T * K, H)
    y_pairs[pos] = y
    return y_pairs.reshape(T, K, H)


def combine_reference(
    expert_y_per_rank: Sequence,
    expert_meta_per_rank: Sequence,
    src_rank: int,
    topk_weights: torch.Tensor,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Combine for source rank ``src_rank`` from every rank's expert outputs.

    ``expert_y_per_rank[r][e]`` [n, H] are rank r's local expert e outputs and
    ``expert_meta_per_rank[r][e]`` their metadata, whose last three columns are
    (src_rank, src_token, k) (so both the reference's 4-column and the library's
    3-column metadata work). Returns [T, H] in ``out_dtype`` (default: the outputs' dtype).
    """
    T, K = topk_weights.shape
    y_pairs = _gather_pairs(expert_y_per_rank, expert_meta_per_rank, src_rank, T, K)
    return combine_pairs_reference(y_pairs, topk_weights, out_dtype)


def combine_reference_loop(
    expert_y_per_rank: Sequence,
    expert_meta_per_rank: Sequence,
    src_rank: int,
    topk_weights: torch.Tensor,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Pair-by-pair spelling of ``combine_reference`` (tests only)."""
    T, K = topk_weights.shape
    found = {}
    H, dtype = None, None
    for ys_r, metas_r in zip(expert_y_per_rank, expert_meta_per_rank, strict=True):
        for y_e, m_e in zip(ys_r, metas_r, strict=True):
            H, dtype = y_e.shape[-1], y_e.dtype
            for row, (s, t, k) in zip(y_e, m_e[:, -3:].tolist()):
                if s == src_rank:
                    if (t, k) in found:
                        raise ValueError(f"pair {(t, k)} of rank {src_rank} delivered twice")
                    found[(t, k)] = row
    if len(found) != T * K:
        raise ValueError(f"rank {src_rank}: {len(found)} of {T * K} pairs delivered")
    out_dtype = dtype if out_dtype is None else out_dtype
    out = torch.empty(T, H, dtype=out_dtype, device=topk_weights.device)
    for t in range(T):
        acc = torch.zeros(H, dtype=torch.float32, device=topk_weights.device)
        for k in range(K):
            acc = acc + topk_weights[t, k].float() * found[(t, k)].float()
        out[t] = acc.to(out_dtype)
    return out


# --------------------------------------------------------------------------- end to end


def moe_reference(all_inputs: Sequence, rank: int, num_experts: int, world: int) -> torch.Tensor:
    """Expected [T, H] result of dispatch -> fake GEMM -> combine for source rank ``rank``.

    out[t] = sum_k w[t, k] * y[t, k].float() (fp32, k ascending) cast to x.dtype, with
    y[t, k] = (x[t].float() * (1 + owner_rank(idx[t, k]))).to(x.dtype). Computed from
    ``rank``'s own inputs only (the other ranks' inputs are checked, not needed); it
    equals the dispatch/GEMM/combine pipeline of this module bitwise.
    """
    _check_all_inputs(all_inputs, num_experts, world)
    x, idx, w = all_inputs[rank]
    factor = (1 + owner_rank(idx.long(), num_experts, world)).float()  # [T, K]
    used = idx.long() != MASKED_SLOT
    acc = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    wf = w.float()
    for k in range(idx.shape[1]):
        # Same two roundings as _fake_gemm and the same accumulation as
        # combine_pairs_reference, pair by pair; an unused slot adds nothing (not even a 0).
        y = (x.float() * factor[:, k : k + 1]).to(x.dtype)
        acc = torch.where(used[:, k : k + 1], acc + wf[:, k : k + 1] * y.float(), acc)
    return acc.to(x.dtype)


def moe_reference_loop(all_inputs: Sequence, rank: int, num_experts: int, world: int) -> torch.Tensor:
    """Token-by-token spelling of ``moe_reference`` (tests only)."""
    _check_all_inputs(all_inputs, num_experts, world)
    x, idx, w = all_inputs[rank]
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        acc = torch.zeros(x.shape[1], dtype=torch.float32, device=x.device)
        for k, e in enumerate(idx[t].tolist()):
            if e == MASKED_SLOT:
                continue
            r = owner_rank(e, num_experts, world)
            y = (x[t].float() * float(1 + r)).to(x.dtype)
            acc = acc + w[t, k].float() * y.float()
        out[t] = acc.to(x.dtype)
    return out


def moe_reference_all(all_inputs: Sequence, num_experts: int, world: int) -> list:
    """``moe_reference`` for every source rank."""
    return [moe_reference(all_inputs, r, num_experts, world) for r in range(world)]


# --------------------------------------------------------------------------- library layout


def _lexsort_rows(m: torch.Tensor) -> torch.Tensor:
    """Permutation sorting the rows of int matrix ``m`` lexicographically (column 0 first)."""
    order = torch.arange(m.shape[0], device=m.device)
    # Stable sorts from the last key to the first leave ties ordered by the later keys.
    for c in reversed(range(m.shape[1])):
        order = order[torch.sort(m[order, c], stable=True).indices]
    return order


def canonical_dispatch(
    expert_x: torch.Tensor,
    expert_num_tokens: torch.Tensor,
    expert_meta: torch.Tensor,
    rank: Optional[int] = None,
) -> DispatchedTokens:
    """The library's padded dispatch output of one rank, in the reference's order.

    expert_x [E_local, cap, H], expert_num_tokens [E_local] int32 (valid rows per expert,
    the rest is padding and ignored), expert_meta int32 [E_local, cap, 3] with columns
    (src_rank, src_token, k). Returns per local expert the valid tokens and int64 metadata
    sorted by (src_rank, src_token, k), so they compare exactly with
    ``dispatch_reference`` (see ``assert_dispatch_matches``).
    """
    if expert_x.dim() != 3:
        raise ValueError(f"expert_x must be [E_local, cap, H], got {tuple(expert_x.shape)}")
    E, cap, _ = expert_x.shape
    if tuple(expert_num_tokens.shape) != (E,):
        raise ValueError(f"expert_num_tokens must be [{E}], got {tuple(expert_num_tokens.shape)}")
    if tuple(expert_meta.shape) != (E, cap, 3):
        raise ValueError(f"expert_meta must be [{E}, {cap}, 3], got {tuple(expert_meta.shape)}")
    counts = [int(n) for n in expert_num_tokens.tolist()]
    tokens, meta = [], []
    for e, n in enumerate(counts):
        if not 0 <= n <= cap:
            raise ValueError(f"expert {e}: expert_num_tokens = {n} outside [0, {cap}]")
        m = expert_meta[e, :n].long()
        order = _lexsort_rows(m)
        tokens.append(expert_x[e, :n][order])
        meta.append(m[order])
    return DispatchedTokens(rank, tokens, meta, LIBRARY_META_COLUMNS)


def dispatch_mismatch(actual: DispatchedTokens, expected: DispatchedTokens) -> Optional[str]:
    """First difference between two canonical dispatches, or None when identical.

    Compares counts, (src_rank, src_token, k) and token bits exactly; works across the
    3- and 4-column metadata layouts and across devices.
    """
    if actual.num_local_experts != expected.num_local_experts:
        return f"{actual.num_local_experts} local experts, expected {expected.num_local_experts}"
    for e in range(expected.num_local_experts):
        na, ne = actual.num_tokens[e], expected.num_tokens[e]
        if na != ne:
            return f"local expert {e}: {na} tokens, expected {ne}"
        ma, me = actual.pair_meta(e).cpu(), expected.pair_meta(e).cpu()
        bad = (ma != me).any(dim=1).nonzero()
        if bad.numel():
            i = int(bad[0])
            return f"local expert {e} row {i}: (src_rank, src_token, k) = {ma[i].tolist()}, expected {me[i].tolist()}"
        ta, te = actual.tokens[e].cpu(), expected.tokens[e].cpu()
        if ta.dtype != te.dtype or ta.shape != te.shape:
            return f"local expert {e}: tokens {ta.dtype}{tuple(ta.shape)}, expected {te.dtype}{tuple(te.shape)}"
        # Bitwise: payloads are copied, never computed, so -0.0 vs 0.0 or NaN must not pass.
        bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[ta.element_size()]
        bad = (ta.view(bits) != te.view(bits)).any(dim=1).nonzero()
        if bad.numel():
            i = int(bad[0])
            return f"local expert {e} row {i} (src_rank, src_token, k) = {me[i].tolist()}: token payload differs"
    return None


def assert_dispatch_matches(actual: DispatchedTokens, expected: DispatchedTokens) -> None:
    msg = dispatch_mismatch(actual, expected)
    if msg is not None:
        raise AssertionError(f"dispatch mismatch on rank {expected.rank}: {msg}")


# --------------------------------------------------------------------------- fp8 rows


def quantize_fp8(x: torch.Tensor, fp8_dtype: torch.dtype, pow2_scales: bool = False):
    """What fp8 dispatch delivers for rows x [..., H]: (q [..., H] fp8_dtype, scale [..., ceil(H/128)]
    float32), op for op the arithmetic of include/moe_a2a/ep/fp8.h, so the bytes match exactly.

    Per block of 128 channels (the last one shorter when H is not a multiple of 128):
    scale = max(amax, 1e-30) / fp8 max (rounded up to a power of two with pow2_scales),
    q = round-to-nearest-even(clamp(x * (1 / scale), -max, max)). A block holding inf or NaN
    gets scale inf or NaN, so it dequantizes to NaN; other blocks and tokens are untouched.
    Every step is correctly rounded on CPU and CUDA tensors alike (the multi-node path quantizes
    with it on the GPU), so the bytes are the same on either."""
    if fp8_dtype not in FP8_FORMATS:
        raise TypeError(f"quantize_fp8: fp8_dtype must be float8_e4m3fn or float8_e4m3fnuz, got {fp8_dtype}")
    fp8_max = torch.finfo(fp8_dtype).max
    H = x.shape[-1]
    blocks = -(-H // FP8_BLOCK)
    xf = x.float()
    padded = torch.nn.functional.pad(xf, (0, blocks * FP8_BLOCK - H))  # zeros never raise an amax
    amax = padded.unflatten(-1, (blocks, FP8_BLOCK)).abs().amax(-1)  # NaN if the block has one
    # Divided by a tensor, not a Python float: torch's CUDA kernels multiply by the reciprocal of a
    # scalar divisor, which can round the scale differently from fp8.h's division.
    scale = torch.clamp(amax, min=FP8_AMAX_FLOOR) / torch.full_like(amax, fp8_max)  # clamp keeps NaN
    if pow2_scales:
        mantissa, exponent = torch.frexp(scale)  # scale = mantissa * 2^exponent, mantissa in [0.5, 1)
        up = torch.ldexp(torch.ones_like(scale), torch.where(mantissa == 0.5, exponent - 1, exponent))
        scale = torch.where(torch.isfinite(scale), up, scale)
    inv = 1.0 / scale
    per_channel = inv.repeat_interleave(FP8_BLOCK, dim=-1)[..., :H]
    q = torch.clamp(xf * per_channel, -fp8_max, fp8_max).to(fp8_dtype)
    return q, scale


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """q [..., H] fp8 and scale [..., ceil(H/128)] -> values [..., H] in dtype (q * its block's scale), contiguous."""
    H, blocks = q.shape[-1], scale.shape[-1]
    padded = torch.nn.functional.pad(q.float(), (0, blocks * FP8_BLOCK - H))
    return (padded.unflatten(-1, (blocks, FP8_BLOCK)) * scale.unsqueeze(-1)).flatten(-2)[..., :H].to(dtype).contiguous()
