"""Every round of the soak checked on the GPU, without waiting for it (soak_schedule.py).

The host check (mixed_rounds.check_round) copies every output to the CPU and compares it there
with the reference: exact, but it waits for the round and costs milliseconds, so a long soak can
afford it only every check_every-th round. The checks here are torch ops queued behind each
round on the current stream. Each round leaves one word in a Window on the GPU: a bit for each
check that failed. The host reads the window once per check_every rounds (one copy) and names
the first round that failed and its checks.

dispatch (this rank as the expert side), from every rank's inputs (each rank derives them all):
  counts   each local expert received as many rows as (token, k) pairs name it;
  pairs    every row's (source, token, k) is a pair that names the row's expert;
  repeats  no pair arrives twice (with the two above: each expert's rows are its pairs, once);
  rows     each row holds its token: bit for bit; fp8 rows within fp8 rounding of the token
           (their bytes and scales are compared exactly by the host check);
  weights  each row carries its pair's router weight, bit for bit;
  padding  packed layout: the rows between an expert's last and the next one's first are zero.
combine (this rank as the token side), from its own inputs only:
  out      against sum_k w[t, k] * round(x[t] * c_k), c_k = 1 + the rank of slot k's expert, within
           the host check's tolerance (fp8 rounds: x as the experts saw it, through the reference
           quantizer on the GPU, as the host check does);
  grad x, grad w   backward rounds: out and both gradients against mixed_rounds.closed_form.
"""

import dataclasses
from typing import Callable, List, Optional, Tuple

import torch
from mixed_rounds import (
    BACKWARD_TOL,
    FORWARD_TOL,
    Bank,
    Outcome,
    Shape,
    as_experts_saw,
    backward_gradient,
    closed_form,
    rank_inputs,
    routing,
)

from moe_a2a.fp8_formats import FP8_BLOCK

CHECKS = ("counts", "pairs", "repeats", "rows", "weights", "padding", "out", "grad x", "grad w")
# |dequantized - x| of an fp8 row, both formats (3 mantissa bits): half a step of the value's
# binade (2^-4 of it) above the smallest normal, half a subnormal step (2^-10 of the block's
# scale at most) below; the bound doubles the latter for margin.
FP8_REL, FP8_SCALE_ABS = 2.0**-4, 2.0**-9


class Window:
    """The check words of the rounds since the host last looked, on the GPU."""

    def __init__(self, size: int, device):
        self.words = torch.zeros(size, dtype=torch.int32, device=device)
        # Each slot's (what: its round, explain: its wrong outputs), each described on demand.
        self.rounds: List[Tuple[Callable[[], str], Callable[[], str]]] = []
        self.bits = {}  # a tuple of check names -> their bits, on the GPU (few launches a round)

    def free(self) -> int:
        """Rounds the window can still take."""
        return self.words.numel() - len(self.rounds)

    def record(self, failed: dict, what: Callable[[], str], explain: Callable[[], str]) -> None:
        """failed: check name -> a bool tensor on the GPU (True: that check failed); explain()
        says, once the round failed, what its wrong outputs hold."""
        names = tuple(failed)
        if names not in self.bits:
            self.bits[names] = torch.tensor([1 << CHECKS.index(n) for n in names], device=self.words.device)
        word = (torch.stack([failed[n] for n in names]).to(torch.int32) * self.bits[names]).sum()
        self.words[len(self.rounds)] = word  # a copy on the stream, no wait
        self.rounds.append((what, explain))

    def drain(self) -> Optional[str]:
        """Waits for the recorded rounds; None if every check passed, else the first failed
        round and its checks (and how many rounds failed). Empties the window."""
        words = self.words[: len(self.rounds)].tolist()
        rounds, self.rounds = self.rounds, []
        self.words.zero_()
        failed = [i for i, word in enumerate(words) if word]
        if not failed:
            return None
        first = words[failed[0]]
        checks = [name for bit, name in enumerate(CHECKS) if first >> bit & 1]
        what, explain = rounds[failed[0]]
        why = explain() if "out" in checks else ""
        said = f"{len(failed)} of {len(words)} rounds failed the GPU checks; the first: {what()}: {checks}"
        return said + (f"\n  {why}" if why else "")


class Everyone:
    """Every rank's inputs of one round on the GPU, padded to max_tokens (ids -1 past a rank's
    count): x [world, T, H], idx [world, T, K] int64, w [world, T, K] float32."""

    def __init__(self, shape: Shape, outcome: Outcome, bank: Bank, world: int, device):
        spec, T, K = outcome.spec, shape.max_tokens, shape.topk
        idx = torch.full((world, T, K), -1, dtype=torch.int64)
        w = torch.zeros(world, T, K)
        for r in range(world):
            idx[r, : spec.tokens[r]], w[r, : spec.tokens[r]] = routing(shape, spec, r, world)
        self.x = bank.everyone_on_device(spec)
        self.idx, self.w = idx.to(device), w.to(device)


def dispatch_failures(o: Outcome, shape: Shape, every: Everyone, rank: int, world: int) -> dict:
    d, EL, K, H = o.d, shape.experts_per_rank, shape.topk, shape.hidden
    T = every.idx.shape[1]
    rows = d.expert_x.reshape(-1, H)
    meta = d.expert_meta.reshape(-1, 3).long()
    offsets, counts = d.expert_offsets.long(), d.expert_num_tokens.long()
    # Each row's expert (EL: past the last segment) and whether it is one of the expert's rows.
    j = torch.arange(rows.shape[0], device=rows.device)
    expert = torch.searchsorted(offsets, j, right=True) - 1
    in_segment = expert < EL
    expert = expert.clamp(0, EL - 1)
    valid = in_segment & (j - offsets[expert] < counts[expert])

    local = torch.where(every.idx >= 0, every.idx - rank * EL, -1)  # the local expert of each pair, or < 0 / >= EL
    wanted = (local.unsqueeze(-1) == torch.arange(EL, device=rows.device)).sum((0, 1, 2))

    src, tok, k = meta.unbind(1)
    in_range = (src >= 0) & (src < world) & (tok >= 0) & (tok < T) & (k >= 0) & (k < K)
    src, tok, k = src.clamp(0, world - 1), tok.clamp(0, T - 1), k.clamp(0, K - 1)
    names_expert = in_range & (every.idx[src, tok, k] == rank * EL + expert)
    key = torch.where(valid, (src * T + tok) * K + k, -1 - j)  # rows of no expert: keys of their own
    keys = key.sort().values

    want_x = every.x[src, tok]
    if shape.fp8 is None:
        bits = {1: torch.int8, 2: torch.int16, 4: torch.int32}[rows.element_size()]
        row_wrong = (rows.view(bits) != want_x.view(bits)).any(1)
        pad_nonzero = (rows != 0).any(1)
    else:
        row_wrong = fp8_rows_wrong(rows, d.expert_x_scale.reshape(rows.shape[0], -1), want_x)
        pad_nonzero = (rows.view(torch.uint8) != 0).any(1)
    padding = in_segment & ~valid if shape.layout == "packed" else torch.zeros_like(valid)
    return {
        "counts": (counts != wanted).any(),
        "pairs": (valid & ~names_expert).any(),
        "repeats": (keys[1:] == keys[:-1]).any(),
        "rows": (valid & row_wrong).any(),
        "weights": (valid & (d.expert_weights.reshape(-1) != every.w[src, tok, k])).any(),
        "padding": (padding & pad_nonzero).any(),
    }


def per_channel(scale: torch.Tensor, H: int) -> torch.Tensor:
    """[rows, ceil(H / FP8_BLOCK)] block scales -> [rows, H]."""
    return scale.repeat_interleave(FP8_BLOCK, dim=-1)[..., :H]


def fp8_rows_wrong(q: torch.Tensor, scale: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Per row: some value of the dequantized row is farther from the token than fp8 rounding."""
    got = q.float() * per_channel(scale, q.shape[-1])
    want = want.float()
    bound = FP8_REL * want.abs() + FP8_SCALE_ABS * per_channel(scale, q.shape[-1])
    return ~((got - want).abs() <= bound).all(1)  # written so that NaN fails


def beyond(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> torch.Tensor:
    """Per value: outside torch.testing.assert_close's bound (NaN is outside)."""
    return ~((got - want).abs() <= atol + rtol * want.abs())


def outside(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> torch.Tensor:
    """Some value outside torch.testing.assert_close's bound, as a bool on the GPU."""
    return beyond(got, want, rtol, atol).any()


def combine_failures(o: Outcome, shape: Shape, every: Everyone, bank: Bank, rank: int) -> dict:
    T = o.spec.tokens[rank]
    x, idx, w = every.x[rank, :T], every.idx[rank, :T], every.w[rank, :T]
    used = idx >= 0
    c = 1.0 + torch.div(idx.clamp(min=0), shape.experts_per_rank, rounding_mode="floor").float()
    if o.grad_x is not None:
        g = backward_gradient(bank, o.spec, rank, on_device=True)
        want_out, want_gx, want_gw, gw_magnitude = closed_form((x, idx, w), g, shape.experts_per_rank, shape.dtype)
        tol = BACKWARD_TOL[shape.dtype]
        return {
            "out": outside(o.out.double(), want_out, **tol),
            "grad x": outside(o.grad_x.double(), want_gx, **tol),
            "grad w": ~((o.grad_w.double() - want_gw).abs() <= 1e-5 * gw_magnitude + 1e-6).all(),
        }
    # y = round(x * c) in the token dtype, summed in fp32 with the weights. After an fp8 dispatch
    # the experts saw x through fp8 (the reference quantizer, which rounds on the GPU as fp8.h does):
    # out is measured from those values, as the host check does. A bound from x itself (fp8's
    # rounding as slack) left too little for the bf16 roundings on both sides at a token whose
    # values sat just past fp8's half steps (soak, world 3, c = 3: session 44).
    x = as_experts_saw(x, shape)
    y = (x.float().unsqueeze(1) * c.unsqueeze(-1)).to(shape.dtype).float()
    want = (torch.where(used, w, 0.0).unsqueeze(-1) * y).sum(1).to(shape.dtype).float()
    return {"out": outside(o.out.float(), want, **FORWARD_TOL[shape.dtype])}


def shares_of_out(o: Outcome, shape: Shape, bank: Bank, rank: int, world: int) -> torch.Tensor:
    """[world, T, H] float64 on the host: each expert rank's part of this rank's out (out is
    their sum), from the tokens as the experts saw them."""
    x, idx, w = rank_inputs(shape, o.spec, bank, rank, world)
    x = as_experts_saw(x, shape)
    shares = torch.zeros(world, *x.shape, dtype=torch.float64)
    for k in range(idx.shape[1]):
        d = torch.div(idx[:, k].long().clamp(min=0), shape.experts_per_rank, rounding_mode="floor")
        y = (x.float() * (1.0 + d.float())[:, None]).to(shape.dtype).double()
        wk = torch.where(idx[:, k] >= 0, w[:, k].double(), 0.0)
        shares.index_put_((d, torch.arange(x.shape[0])), wk[:, None] * y, accumulate=True)
    return shares


def explain_out(o: Outcome, shape: Shape, bank: Bank, rank: int, world: int, shown: int = 3) -> str:
    """A failed "out" check, on the host: how many tokens are off, where in their rows, and
    whether each one's sum lacks (or holds twice) one expert rank's share, which tells a lost or
    repeated remote write from a wrong value. out is the caller's tensor, which no later round
    touches, so it is still the failed round's."""
    shares = shares_of_out(o, shape, bank, rank, world)
    want, got = shares.sum(0), o.out.cpu().double()
    tol = (BACKWARD_TOL if o.grad_x is not None else FORWARD_TOL)[shape.dtype]

    def off(value):  # [T, H]: outside the check's bound
        return beyond(got, value, **tol)

    bad = off(want)
    tokens = bad.any(1).nonzero().flatten().tolist()
    idx = rank_inputs(shape, o.spec, bank, rank, world).topk_idx
    lines = [f"out on the host: {len(tokens)} of {want.shape[0]} tokens off"]
    for t in tokens[:shown]:
        cols = bad[t].nonzero().flatten().tolist()
        c = cols[0]
        fits = [f"lacks rank {d}'s share" for d in range(world) if not off(want - shares[d])[t].any()]
        fits += [f"holds rank {d}'s share twice" for d in range(world) if not off(want + shares[d])[t].any()]
        ranks = sorted({i // shape.experts_per_rank for i in idx[t].tolist() if i >= 0})
        lines.append(
            f"token {t} (its experts on ranks {ranks}): {len(cols)} of {want.shape[1]} values off, columns "
            f"{cols[0]}..{cols[-1]}; column {c}: got {float(got[t, c]):.6g}, want {float(want[t, c]):.6g}; "
            + (", ".join(fits) if fits else "no one rank's share explains it")
        )
    return "\n  ".join(lines)


def record(window: Window, outcomes: List[Outcome], shape: Shape, bank: Bank, rank: int, world: int, what) -> None:
    """Queues every check of a round's outcomes; what(outcome) -> str describes one for the message."""
    for o in outcomes:
        every = Everyone(shape, o, bank, world, window.words.device)
        failed = {**dispatch_failures(o, shape, every, rank, world), **combine_failures(o, shape, every, bank, rank)}
        # Held until the window drains (up to 2 x check_every rounds): the round's spec and out, not
        # its dispatch's caller-owned rows (a round's rows of the fp8 shape at world 8 are 29 MB).
        o = dataclasses.replace(o, d=None)
        window.record(failed, lambda o=o: what(o), lambda o=o: explain_out(o, shape, bank, rank, world))
