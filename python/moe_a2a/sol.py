"""Speed-of-light model of dispatch and combine: the fewest bytes that must cross between
GPUs for a given routing, and the time that takes at a given bandwidth and latency.

Pure Python + torch; imports without the compiled extension.

Bytes (token payload only; metadata, weights and counts are left out, which keeps this a
lower bound). With experts owned in contiguous blocks (``owner(e) = e // (E / world)``),
for a token t of source rank s let

    R(t) = { owner(e) : e in topk_idx[t] } \\ { s }       (distinct REMOTE owner ranks)

    dispatch:  bytes(s -> d) = H * elem_bytes * #{ t on s : d in R(t) }
    combine:   bytes(d -> s) = bytes(s -> d) of dispatch  (each remote rank returns one
               partial sum per token it received: same bytes, reversed direction)

    bytes_out[r] = sum_d bytes(r -> d),     bytes_in[r] = sum_s bytes(s -> r)

A token whose experts all live on its own rank crosses nothing; a token with several
experts on one remote rank crosses to it once.

fp8 dispatch (``dispatch_dtype=torch.float8_e4m3fn`` / ``float8_e4m3fnuz``): a dispatched row is
H fp8 bytes and one fp32 scale per block of 128 channels, ``H + 4 * ceil(H / 128)`` bytes
(``fp8_row_bytes``; the kernels pad the scales to 16 bytes, which is not counted); combine still
moves token-dtype rows. Only dispatch's link and local terms change.

Time of one phase, with B_out / B_in the per-GPU peer bandwidth in GB/s (1 GB = 1e9 B)
and L the one-way signal latency plus one kernel launch, in us:

    T_phase = max over ranks r of max(bytes_out[r] / B_out, bytes_in[r] / B_in) + L

and the speed of light of dispatch + combine is T_dispatch + T_combine.

Local memory (local_bytes): whatever the transport, the rows must also move through each
rank's own memory (HBM), once the link has delivered them. Per rank r, in rows of H * elem_bytes:

    dispatch:  read  one received row per (token, distinct destination rank r), over every
                     source INCLUDING r itself (its own tokens land in the same place), and
               write one row per (token, k) pair whose expert is on r
    combine:   expert side: read  one expert-output row per (token, k) pair whose expert is on r,
                            write one partial per (token, rank r) it holds
               token side:  read  one partial per (own token, distinct destination rank),
                            write one output row per own token

With B_hbm the device's copy bandwidth counted as bytes read + written (a copy of n bytes
moves 2n), the bound of a phase is

    T_phase = max over ranks r of max(bytes_out[r] / B, bytes_in[r] / B,
                                      local[r] / B_hbm) + L        (phase_bound_us)

and "bound" names the larger of the two terms (link or local). At world 2 and large batches the
local term can be the larger one: each received row goes to about topk / 2 experts.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Union

import torch

from .fp8_formats import FP8_BLOCK, FP8_FORMATS
from .reference import experts_per_rank

__all__ = [
    "PhaseBytes",
    "SolSummary",
    "FORMULA",
    "traffic_matrix",
    "traffic_matrix_loop",
    "phase_bytes",
    "sol_time_us",
    "speed_of_light",
    "LOCAL_FORMULA",
    "LocalBytes",
    "local_bytes",
    "pairs_matrix",
    "phase_bound_us",
    "PhaseBound",
    "bounds",
    "fp8_row_bytes",
    "row_bytes",
]

LOCAL_FORMULA = (
    "local dispatch[r] = H*elem_bytes*(#(token, distinct dest rank r) incl. r's own + #(token, k) on r); "
    "local combine[r] = H*elem_bytes*(#(token, k) on r + #(token, rank r) + #(own token, dest rank) + #own tokens); "
    "T_phase = max_r max(out[r]/B, in[r]/B, local[r]/B_hbm) + L"
)

FORMULA = (
    "T_phase = max_r max(bytes_out[r]/B_out, bytes_in[r]/B_in) + L; "
    "dispatch bytes(s->d) = H*elem_bytes*#{tokens t of s with an expert on d != s}; "
    "combine = the same bytes reversed"
)


@dataclasses.dataclass
class PhaseBytes:
    """Bytes one phase must move. ``matrix[s][d]`` = bytes sent by rank s to rank d."""

    matrix: list  # list[list[int]], zero diagonal
    bytes_out: list  # list[int], row sums
    bytes_in: list  # list[int], column sums

    @property
    def total(self) -> int:
        return sum(self.bytes_out)

    @property
    def busiest(self) -> int:
        """The busiest rank's max(bytes out, bytes in): what its links must carry in this phase."""
        return max((max(o, i) for o, i in zip(self.bytes_out, self.bytes_in)), default=0)

    @classmethod
    def from_matrix(cls, matrix) -> "PhaseBytes":
        m = [[int(v) for v in row] for row in matrix]
        world = len(m)
        return cls(
            matrix=m,
            bytes_out=[sum(row) for row in m],
            bytes_in=[sum(m[s][d] for s in range(world)) for d in range(world)],
        )


@dataclasses.dataclass
class SolSummary:
    """Speed of light of one routing at given link numbers."""

    dispatch: PhaseBytes
    combine: PhaseBytes
    dispatch_us: float
    combine_us: float
    bw_out_GBps: float
    bw_in_GBps: float
    latency_us: float
    formula: str = FORMULA

    @property
    def total_us(self) -> float:
        return self.dispatch_us + self.combine_us

    @property
    def total_bytes(self) -> int:
        return self.dispatch.total + self.combine.total

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["total_us"] = self.total_us
        d["total_bytes"] = self.total_bytes
        return d


def _topk_list(all_topk_idx: Sequence) -> list:
    # Accept bare index tensors or reference.Routing tuples.
    return [getattr(t, "topk_idx", t) for t in all_topk_idx]


def _elem_bytes(elem_bytes: Union[int, torch.dtype]) -> int:
    if isinstance(elem_bytes, torch.dtype):
        return torch.empty((), dtype=elem_bytes).element_size()
    return int(elem_bytes)


def fp8_row_bytes(hidden: int) -> int:
    """Bytes of one fp8 dispatch row: H fp8 bytes and ceil(H / 128) fp32 scales."""
    return int(hidden) + 4 * (-(-int(hidden) // FP8_BLOCK))


def row_bytes(hidden: int, elem_bytes: Union[int, torch.dtype], dispatch_dtype: Optional[torch.dtype] = None) -> tuple:
    """(dispatch, combine) bytes of one row: token-dtype rows both ways, or fp8 rows to the experts."""
    token_row = int(hidden) * _elem_bytes(elem_bytes)
    if dispatch_dtype is None:
        return token_row, token_row
    if dispatch_dtype not in FP8_FORMATS:
        raise ValueError(f"dispatch_dtype must be None, float8_e4m3fn or float8_e4m3fnuz, got {dispatch_dtype}")
    return fp8_row_bytes(hidden), token_row


def traffic_matrix(all_topk_idx: Sequence, num_experts: int, world: int) -> torch.Tensor:
    """[world, world] int64 CPU tensor: tokens rank s must send to rank d (zero diagonal).

    ``all_topk_idx[s]`` is rank s's [T_s, topk] expert ids (int32/int64, any device).
    """
    epr = experts_per_rank(num_experts, world)
    idx_list = _topk_list(all_topk_idx)
    if len(idx_list) != world:
        raise ValueError(f"got routing of {len(idx_list)} ranks for world {world}")
    out = torch.zeros(world, world, dtype=torch.int64)
    for s, idx in enumerate(idx_list):
        owners = idx.long().cpu() // epr  # [T, K]
        if owners.numel() and (int(owners.min()) < 0 or int(owners.max()) >= world):
            raise ValueError(f"rank {s}: expert id outside [0, {num_experts})")
        # One flag per (token, destination rank): several experts on the same rank
        # still need the token only once there.
        present = torch.zeros(owners.shape[0], world, dtype=torch.bool)
        present.scatter_(1, owners, True)
        out[s] = present.sum(dim=0)
        out[s, s] = 0  # the own rank is reached without crossing a link
    return out


def traffic_matrix_loop(all_topk_idx: Sequence, num_experts: int, world: int) -> torch.Tensor:
    """Token-by-token spelling of ``traffic_matrix`` (tests only)."""
    epr = experts_per_rank(num_experts, world)
    out = torch.zeros(world, world, dtype=torch.int64)
    for s, idx in enumerate(_topk_list(all_topk_idx)):
        for experts in idx.tolist():
            for d in {e // epr for e in experts}:
                if d != s:
                    out[s, d] += 1
    return out


def phase_bytes(
    all_topk_idx: Sequence,
    num_experts: int,
    world: int,
    hidden: int,
    elem_bytes: Union[int, torch.dtype],
    dispatch_dtype: Optional[torch.dtype] = None,
) -> tuple:
    """(dispatch, combine) PhaseBytes for this routing; combine is dispatch's rows transposed
    (in the token dtype; dispatch's in fp8 with ``dispatch_dtype``)."""
    tokens = traffic_matrix(all_topk_idx, num_experts, world)
    dispatch_row, combine_row = row_bytes(hidden, elem_bytes, dispatch_dtype)
    dispatch = PhaseBytes.from_matrix((tokens * dispatch_row).tolist())
    combine = PhaseBytes.from_matrix((tokens.t() * combine_row).tolist())
    return dispatch, combine


def sol_time_us(
    bytes_out_per_rank: Sequence,
    bytes_in_per_rank: Sequence,
    bw_out_GBps: float,
    bw_in_GBps: float,
    latency_us: float,
) -> float:
    """max over ranks r of max(out[r] / B_out, in[r] / B_in) + L, in microseconds.

    Bandwidths in GB/s with 1 GB = 1e9 bytes, so bytes / (GBps * 1e3) is microseconds.
    """
    if bw_out_GBps <= 0 or bw_in_GBps <= 0:
        raise ValueError(f"bandwidths must be positive, got {bw_out_GBps}, {bw_in_GBps}")
    outs = [float(b) for b in bytes_out_per_rank]
    ins = [float(b) for b in bytes_in_per_rank]
    if len(outs) != len(ins) or not outs:
        raise ValueError(f"need one bytes_out and one bytes_in per rank, got {len(outs)}, {len(ins)}")
    worst = max(max(o / (bw_out_GBps * 1e3), i / (bw_in_GBps * 1e3)) for o, i in zip(outs, ins))
    return worst + float(latency_us)


def speed_of_light(
    all_topk_idx: Sequence,
    num_experts: int,
    world: int,
    hidden: int,
    elem_bytes: Union[int, torch.dtype],
    bw_out_GBps: float,
    bw_in_GBps: Optional[float] = None,
    latency_us: float = 0.0,
    dispatch_dtype: Optional[torch.dtype] = None,
) -> SolSummary:
    """Bytes and time of dispatch and combine at the given link numbers.

    ``bw_in_GBps`` defaults to ``bw_out_GBps``; each phase pays ``latency_us`` once.
    """
    bw_in = bw_out_GBps if bw_in_GBps is None else bw_in_GBps
    dispatch, combine = phase_bytes(all_topk_idx, num_experts, world, hidden, elem_bytes, dispatch_dtype)
    return SolSummary(
        dispatch=dispatch,
        combine=combine,
        dispatch_us=sol_time_us(dispatch.bytes_out, dispatch.bytes_in, bw_out_GBps, bw_in, latency_us),
        combine_us=sol_time_us(combine.bytes_out, combine.bytes_in, bw_out_GBps, bw_in, latency_us),
        bw_out_GBps=float(bw_out_GBps),
        bw_in_GBps=float(bw_in),
        latency_us=float(latency_us),
    )


def _rows_per_rank(all_topk_idx: Sequence, num_experts: int, world: int):
    """Per rank r: (own tokens, (token, distinct rank) rows it receives incl. its own, (own
    token, distinct destination rank) rows it sends incl. to itself, (token, k) pairs on r)."""
    epr = experts_per_rank(num_experts, world)
    idx_list = _topk_list(all_topk_idx)
    if len(idx_list) != world:
        raise ValueError(f"got routing of {len(idx_list)} ranks for world {world}")
    tokens, rows_in, rows_out, pairs = [0] * world, [0] * world, [0] * world, [0] * world
    for s, idx in enumerate(idx_list):
        owners = idx.long().cpu() // epr  # [T, K]
        if owners.numel() and (int(owners.min()) < 0 or int(owners.max()) >= world):
            raise ValueError(f"rank {s}: expert id outside [0, {num_experts})")
        tokens[s] = int(owners.shape[0])
        present = torch.zeros(owners.shape[0], world, dtype=torch.bool)
        present.scatter_(1, owners, True)
        per_dest = present.sum(dim=0).tolist()
        rows_out[s] = sum(per_dest)
        for r in range(world):
            rows_in[r] += per_dest[r]
        for r, n in enumerate(torch.bincount(owners.reshape(-1), minlength=world).tolist()):
            pairs[r] += n
    return tokens, rows_in, rows_out, pairs


@dataclasses.dataclass
class LocalBytes:
    """Bytes through each rank's own memory per phase (module docstring), per rank."""

    dispatch: list
    combine: list


def local_bytes(
    all_topk_idx: Sequence,
    num_experts: int,
    world: int,
    hidden: int,
    elem_bytes: Union[int, torch.dtype],
    dispatch_dtype: Optional[torch.dtype] = None,
) -> LocalBytes:
    """Per phase and rank, the bytes its own memory must read + write (module docstring):
    dispatch[r] = rows received by r (one per (token, distinct rank r), its own tokens too)
    + pairs on r; combine[r] = pairs on r + rows received by r + rows r sent + tokens of r;
    in rows of H * elem_bytes (dispatch's in fp8 rows with ``dispatch_dtype``)."""
    dispatch_row, combine_row = row_bytes(hidden, elem_bytes, dispatch_dtype)
    tokens, rows_in, rows_out, pairs = _rows_per_rank(all_topk_idx, num_experts, world)
    return LocalBytes(
        dispatch=[(rows_in[r] + pairs[r]) * dispatch_row for r in range(world)],
        combine=[(pairs[r] + rows_in[r] + rows_out[r] + tokens[r]) * combine_row for r in range(world)],
    )


def pairs_matrix(all_topk_idx: Sequence, num_experts: int, world: int) -> torch.Tensor:
    """[world, world] int64 CPU tensor: (token, k) pairs of rank s whose expert is on rank d != s
    (zero diagonal): what a path that sends one row per pair moves, without de-duplication."""
    epr = experts_per_rank(num_experts, world)
    idx_list = _topk_list(all_topk_idx)
    if len(idx_list) != world:
        raise ValueError(f"got routing of {len(idx_list)} ranks for world {world}")
    out = torch.zeros(world, world, dtype=torch.int64)
    for s, idx in enumerate(idx_list):
        owners = idx.long().cpu().reshape(-1) // epr
        out[s] = torch.bincount(owners, minlength=world)[:world]
        out[s, s] = 0
    return out


def phase_bound_us(
    bytes_out_per_rank: Sequence,
    bytes_in_per_rank: Sequence,
    local_per_rank: Sequence,
    bw_GBps: float,
    hbm_GBps: float,
    latency_us: float,
) -> tuple:
    """(us, bound) of one phase: max over ranks of the link time (out or in) and the local
    memory time, plus L. bound is "link" or "local", whichever term is the larger ("latency"
    when nothing moves at all)."""
    if hbm_GBps <= 0:
        raise ValueError(f"local (HBM) bandwidth must be positive, got {hbm_GBps}")
    link = sol_time_us(bytes_out_per_rank, bytes_in_per_rank, bw_GBps, bw_GBps, 0.0)
    local = max((float(b) for b in local_per_rank), default=0.0) / (hbm_GBps * 1e3)
    bound = "latency" if max(link, local) == 0 else ("local" if local > link else "link")
    return max(link, local) + float(latency_us), bound


@dataclasses.dataclass
class PhaseBound:
    """One phase of bounds(): the time, the term that bound it, and both terms in us."""

    us: float
    bound: str
    link_us: float
    local_us: float
    link_bytes: int  # busiest rank's max(bytes out, bytes in)
    local_bytes: int  # busiest rank's local bytes


def bounds(
    all_topk_idx: Sequence,
    num_experts: int,
    world: int,
    hidden: int,
    elem_bytes: Union[int, torch.dtype],
    bw_GBps: float,
    hbm_GBps: float,
    latency_us: float,
    dispatch_dtype: Optional[torch.dtype] = None,
) -> tuple:
    """(dispatch, combine) PhaseBound of one routing: the speed of light with both the link
    and the local-memory terms (phase_bound_us); fp8 rows to the experts with ``dispatch_dtype``."""
    phases = phase_bytes(all_topk_idx, num_experts, world, hidden, elem_bytes, dispatch_dtype)
    local = local_bytes(all_topk_idx, num_experts, world, hidden, elem_bytes, dispatch_dtype)
    out = []
    for p, loc in zip(phases, (local.dispatch, local.combine)):
        us, bound = phase_bound_us(p.bytes_out, p.bytes_in, loc, bw_GBps, hbm_GBps, latency_us)
        out.append(
            PhaseBound(
                us=us,
                bound=bound,
                link_us=sol_time_us(p.bytes_out, p.bytes_in, bw_GBps, bw_GBps, 0.0),
                local_us=max(loc, default=0) / (hbm_GBps * 1e3),
                link_bytes=p.busiest,
                local_bytes=max(loc, default=0),
            )
        )
    return tuple(out)
