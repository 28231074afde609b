"""Rounds of every kind on AllToAlls of many shapes, with inputs that every rank can rebuild and
checks against the pure-torch reference: what the soak (soak_schedule.py: tools/soak.py,
test_soak.py), the property-based test (test_fuzz.py) and the sanitizer run (tools/sanitize.sh)
are made of.

A Shape fixes an AllToAll (with fp8 dispatch or not: fp8 rows are checked byte for byte
against the CPU quantizer, and the experts then work on the dequantized rows; fp8 rounds are
forward only); a Spec fixes one round on it: every rank's token count (0 and
max_tokens allowed), the routing (uniform, skewed towards low expert ids, or every token to the
same experts), masked slots (-1), duplicate expert ids within a token, the kind of round (fused
calls, split calls, a forward round with both backward rounds, or, on an AllToAll of two buffers,
two forward rounds in flight at once) and the seed of its data.
Every rank derives every rank's inputs from (Shape, Spec, rank) alone, so each checks its own
outputs locally, as the other GPU tests do.
"""

import dataclasses
import zlib
from typing import Optional, Tuple

import torch
from all_to_all_checks import check_dispatch, check_fp8_rows, check_layout

import moe_a2a
from moe_a2a import reference as ref
from moe_a2a._collective import all_gather

KINDS = ("fused", "split", "backward", "pair")
FORWARD_KINDS = ("fused", "split")
ROUTINGS = ("uniform", "skewed", "hot")
# combine against the reference: the challenge's tolerance for 16-bit rows; fp32 rows only see
# fp32 sums in another order.
FORWARD_TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=1e-2, atol=5e-3),
    torch.float16: dict(rtol=1e-2, atol=5e-3),
}
# The backward round against its closed form: out and grad x pass 16-bit roundings on the way
# (grad of a row times the expert's factor, each rounded), so a looser bound there.
BACKWARD_TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=2e-2, atol=2e-2),
}


@dataclasses.dataclass(frozen=True)
class Shape:
    """What an AllToAll is built with; num_experts is experts_per_rank x world."""

    experts_per_rank: int
    topk: int
    hidden: int
    max_tokens: int
    dtype: torch.dtype = torch.bfloat16
    layout: str = "padded"
    alignment: int = 1
    num_sms: Optional[int] = None
    fp8: Optional[torch.dtype] = None  # dispatch_dtype: rows quantized inside dispatch (forward only)
    # The fake experts run on the host and their output is copied in (forward rounds only), so
    # that every tensor moe_a2a's kernels read was written by them or by a copy: what
    # compute-sanitizer's initcheck can judge when it instruments only moe_a2a's kernels.
    host_experts: bool = False
    buffers: int = 1  # AllToAll(num_buffers=): 2 lets "pair" rounds keep two rounds in flight

    def kinds(self) -> Tuple[str, ...]:
        """The kinds of round this AllToAll runs: fp8 dispatch has no backward, and a backward
        round's gradients come from torch's kernels (not host_experts); two rounds in flight need
        two buffers."""
        kinds = FORWARD_KINDS + (("backward",) if self.fp8 is None and not self.host_experts else ())
        return kinds + (("pair",) if self.buffers > 1 else ())

    def num_experts(self, world: int) -> int:
        return self.experts_per_rank * world

    def capacity(self, world: int) -> int:
        """Enough for any Spec: with a duplicate id a token brings up to 2 rows to one expert, and
        up to min(topk, experts_per_rank + 1) rows to one rank."""
        rows = world * self.max_tokens
        if self.layout == "padded":
            return rows * min(self.topk, 2)
        per_token = min(self.topk, self.experts_per_rank + 1)
        return rows * per_token + self.experts_per_rank * (self.alignment - 1)

    def build(self, group, world: int, device, timeout_s: float = 5.0) -> moe_a2a.AllToAll:
        key = "max_recv_tokens_per_expert" if self.layout == "padded" else "max_recv_tokens"
        return moe_a2a.AllToAll(
            group,
            self.num_experts(world),
            self.topk,
            self.hidden,
            self.max_tokens,
            self.dtype,
            layout=self.layout,
            expert_alignment=self.alignment,
            num_sms=self.num_sms,
            dispatch_dtype=self.fp8,
            num_buffers=self.buffers,
            timeout_s=timeout_s,
            device=device,
            **{key: self.capacity(world)},
        )


@dataclasses.dataclass(frozen=True)
class Spec:
    tokens: Tuple[int, ...]  # per rank, each in [0, max_tokens]
    routing: str = "uniform"
    masked: float = 0.0  # fraction of (token, k) slots set to -1 (and every slot of token 0)
    duplicates: float = 0.0  # fraction of tokens whose last slot repeats the first slot's expert
    kind: str = "fused"
    seed: int = 0
    int64_ids: bool = False

    def second(self) -> "Spec":
        """The second round of a "pair": other tokens, counts and routing, the same features."""
        return dataclasses.replace(self, tokens=self.tokens[::-1], seed=(self.seed * 7 + 1) % (1 << 31), kind="fused")


class Bank:
    """The tokens of every rank for one Shape: a few fixed tensors per rank, cut to each round's
    T, so that a round draws no large random tensor (its routing is drawn fresh). The gradient of
    a backward round is another copy."""

    COPIES = 3

    def __init__(self, shape: Shape, world: int, rank: int, device):
        seed = zlib.crc32(repr(shape).encode())  # the same in every process (hash() is not)
        self.shape = shape
        self.cpu = []
        for r in range(world):
            g = torch.Generator().manual_seed(seed * 131 + r)
            rows = [torch.randn(shape.max_tokens, shape.hidden, generator=g) for _ in range(self.COPIES)]
            self.cpu.append([t.to(shape.dtype) for t in rows])
        self.device = [t.to(device) for t in self.cpu[rank]]
        self.where, self.everyone = device, None

    def tokens(self, spec: Spec, r: int, on_device: bool, offset: int = 0) -> torch.Tensor:
        copy = (spec.seed + offset) % self.COPIES
        return (self.device[copy] if on_device else self.cpu[r][copy])[: spec.tokens[r]]

    def everyone_on_device(self, spec: Spec) -> torch.Tensor:
        """Every rank's tokens of the round, [world, max_tokens, H] on the device (for
        round_checks.py; made at the first call)."""
        if self.everyone is None:
            ranks = range(len(self.cpu))
            self.everyone = [torch.stack([self.cpu[r][c] for r in ranks]).to(self.where) for c in range(self.COPIES)]
        return self.everyone[spec.seed % self.COPIES]


def routing(shape: Shape, spec: Spec, r: int, world: int):
    """Rank r's (topk_idx, topk_weights) on the CPU; the draws do not depend on the device."""
    g = torch.Generator().manual_seed((spec.seed * 1_000_003 + r) % (1 << 63))
    T, E, K = spec.tokens[r], shape.num_experts(world), shape.topk
    if spec.routing == "hot":  # every token to experts 0..K-1: expert 0 gets every token
        idx = torch.arange(K).repeat(T, 1)
    else:
        keys = torch.rand(T, E, generator=g)
        if spec.routing == "skewed":  # Gumbel top-k: K distinct experts drawn with weights ~ 1/(e+1)^1.2
            keys = -1.2 * torch.log(torch.arange(1, E + 1).float()) - torch.log(-torch.log(keys.clamp(min=1e-12)))
        idx = keys.topk(K, dim=1).indices
    if spec.duplicates and K >= 2:
        repeat = torch.rand(T, generator=g) < spec.duplicates
        idx[repeat, K - 1] = idx[repeat, 0]
    if spec.masked:
        masked = torch.rand(T, K, generator=g) < spec.masked
        masked[:1] = True  # a token with no slot used at all
        idx = idx.masked_fill(masked, ref.MASKED_SLOT)
    weights = torch.softmax(torch.randn(T, K, generator=g), dim=1)
    return idx.to(torch.int64 if spec.int64_ids else torch.int32), weights


def rank_inputs(shape: Shape, spec: Spec, bank: Bank, r: int, world: int, device=None) -> ref.Routing:
    """Rank r's inputs, on `device` (only for this rank: the bank keeps its tokens there) or on
    the CPU."""
    idx, w = routing(shape, spec, r, world)
    if device is None:
        return ref.Routing(bank.tokens(spec, r, on_device=False), idx, w)
    return ref.Routing(bank.tokens(spec, r, on_device=True), idx.to(device), w.to(device))


@dataclasses.dataclass
class Outcome:
    """What one forward round (with its backward rounds, for "backward") gave this rank."""

    spec: Spec  # the round's (for a "pair", each of its two rounds has its own)
    d: object  # moe_a2a.Dispatched
    out: torch.Tensor
    grad_x: Optional[torch.Tensor] = None
    grad_w: Optional[torch.Tensor] = None


def run_round(ep, shape: Shape, spec: Spec, bank: Bank, rank: int, world: int, device, check: bool = False) -> list:
    """One round of spec.kind on ep (a forward round and its two backward rounds for "backward",
    two forward rounds in flight for "pair"); with check, waits for it and raises AssertionError
    on a wrong result. Returns its Outcomes (round_checks.py checks them on the GPU)."""
    x, idx, w = rank_inputs(shape, spec, bank, rank, world, device)
    if spec.kind == "backward":
        outcomes = [_backward_round(ep, shape, spec, bank, rank, (x, idx, w))]
    elif spec.kind == "pair":
        outcomes = _pair_round(ep, shape, spec, bank, rank, world, device, (x, idx, w))
    else:
        outcomes = [_forward_round(ep, shape, spec, rank, (x, idx, w))]
    if check:
        ep.synchronize()
        for o in outcomes:
            (_check_backward if o.grad_x is not None else _check_forward)(o, shape, bank, rank, world)
    return outcomes


def _forward_round(ep, shape, spec, rank, inputs) -> Outcome:
    x, idx, w = inputs
    if spec.kind == "split":
        d = ep.dispatch_recv(ep.dispatch_send(x, idx, w))
        out = ep.combine_recv(ep.combine_send(experts(d, shape, rank), d))
    else:
        d = ep.dispatch(x, idx, w)
        out = ep.combine(experts(d, shape, rank), d)
    return Outcome(spec, d, out)


def _pair_round(ep, shape, spec, bank, rank, world, device, inputs) -> list:
    """Two rounds in flight (num_buffers=2): dispatch A, dispatch B, then the combines, B first on
    odd seeds; through the split calls on seeds = 2 mod 4, interleaved as a two-micro-batch
    pipeline does."""
    b_spec = spec.second()
    a, b = inputs, rank_inputs(shape, b_spec, bank, rank, world, device)
    if spec.seed % 4 == 2:
        pa, pb = ep.dispatch_send(*a), ep.dispatch_send(*b)
        da, db = ep.dispatch_recv(pa), ep.dispatch_recv(pb)
        ca = ep.combine_send(experts(da, shape, rank), da)
        cb = ep.combine_send(experts(db, shape, rank), db)
        out_a, out_b = ep.combine_recv(ca), ep.combine_recv(cb)
    else:
        da, db = ep.dispatch(*a), ep.dispatch(*b)
        ya, yb = experts(da, shape, rank), experts(db, shape, rank)
        if spec.seed % 2:
            out_b, out_a = ep.combine(yb, db), ep.combine(ya, da)
        else:
            out_a, out_b = ep.combine(ya, da), ep.combine(yb, db)
    return [Outcome(spec, da, out_a), Outcome(b_spec, db, out_b)]


def _check_forward(o: Outcome, shape, bank, rank, world):
    everyone = [rank_inputs(shape, o.spec, bank, r, world) for r in range(world)]
    check_layout(o.d, shape.layout, shape.alignment)
    if shape.fp8 is None:
        check_dispatch(o.d, everyone, rank, world, shape.num_experts(world))
    else:  # the bytes and scales exactly; then the experts saw the dequantized tokens
        check_fp8_rows(o.d, everyone, rank, world, shape.num_experts(world), shape.fp8)
    want = reference_out(everyone, shape, rank, world)
    torch.testing.assert_close(o.out.cpu().float(), want.float(), **FORWARD_TOL[shape.dtype])


def reference_out(everyone: list, shape: Shape, rank: int, world: int) -> torch.Tensor:
    """The host check's want of a forward round's out at `rank`, from every rank's inputs (on the
    CPU): the reference MoE, on the tokens as the experts saw them after an fp8 dispatch."""
    everyone = [ref.Routing(as_experts_saw(x, shape), idx, w) for x, idx, w in everyone]
    return ref.moe_reference(everyone, rank, shape.num_experts(world), world)


def experts(d, shape: Shape, rank: int) -> torch.Tensor:
    """The fake experts y = x * (1 + rank) of all_to_all_checks, on the dequantized rows after an
    fp8 dispatch; on the host with shape.host_experts."""
    x, scale = d.expert_x, d.expert_x_scale
    if shape.host_experts:
        x, scale = x.cpu(), None if scale is None else scale.cpu()
    if shape.fp8 is not None:
        H, blocks = x.shape[-1], scale.shape[-1]
        x = ref.dequantize_fp8(x.reshape(-1, H), scale.reshape(-1, blocks), shape.dtype).reshape(x.shape)
    y = (x.float() * (1 + rank)).to(shape.dtype)
    return y.to(d.expert_x.device) if shape.host_experts else y


def as_experts_saw(x: torch.Tensor, shape: Shape) -> torch.Tensor:
    """Tokens x as the experts saw them: x itself, or after an fp8 dispatch its round trip through
    the reference quantizer (which rounds on the GPU as fp8.h does, and on the CPU alike)."""
    if shape.fp8 is None:
        return x
    return ref.dequantize_fp8(*ref.quantize_fp8(x, shape.fp8), shape.dtype)


def backward_gradient(bank: Bank, spec: Spec, rank: int, on_device: bool) -> torch.Tensor:
    """The gradient of a backward round's output (loss = sum(out * g))."""
    return bank.tokens(spec, rank, on_device, offset=1)


def _backward_round(ep, shape, spec, bank, rank, inputs) -> Outcome:
    """Experts y = x * (1 + rank) and loss = sum(out * g): one forward round, then the backward
    of combine and the backward of dispatch."""
    x, idx, w = inputs
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    d = ep.dispatch(xg, idx, wg)
    out = ep.combine(d.expert_x * float(1 + rank), d)
    (out.float() * backward_gradient(bank, spec, rank, on_device=True).float()).sum().backward()
    return Outcome(spec, d, out.detach(), xg.grad, wg.grad)


def _check_backward(o: Outcome, shape, bank, rank, world):
    want_out, want_gx, want_gw, gw_magnitude = closed_form(
        rank_inputs(shape, o.spec, bank, rank, world),
        backward_gradient(bank, o.spec, rank, on_device=False),
        shape.experts_per_rank,
        shape.dtype,
    )
    tol = BACKWARD_TOL[shape.dtype]
    torch.testing.assert_close(o.out.cpu().double(), want_out, **tol, msg=lambda m: f"out: {m}")
    torch.testing.assert_close(o.grad_x.cpu().double(), want_gx, **tol, msg=lambda m: f"grad x: {m}")
    assert_dot_products_close(o.grad_w.cpu().double(), want_gw, gw_magnitude)


def closed_form(inputs: ref.Routing, g: torch.Tensor, experts_per_rank: int, dtype: torch.dtype):
    """out, grad x and grad w of one rank for experts y = x * c (c = 1 + the expert's rank) and
    loss = sum(out * g), in float64, with y and the incoming gradient rounded to the token dtype
    as the library sees them, and the sum of |terms| of each grad w (assert_dot_products_close).
    An unused slot (-1) counts for nothing. On the inputs' device (round_checks.py: on the GPU)."""
    x, idx, w = inputs
    grad_out = g.to(dtype).double()  # the cast in sum(out.float() * g) rounds the gradient
    out, grad_x = (torch.zeros(x.shape, dtype=torch.float64, device=x.device) for _ in range(2))
    grad_w, grad_w_magnitude = (torch.zeros(idx.shape, dtype=torch.float64, device=x.device) for _ in range(2))
    for k in range(idx.shape[1]):
        used = (idx[:, k] >= 0).double()
        c = 1.0 + torch.div(idx[:, k].long().clamp(min=0), experts_per_rank, rounding_mode="floor").float()
        y = (x.float() * c[:, None]).to(dtype).double()
        wk = w[:, k].double() * used
        out += wk[:, None] * y
        grad_x += (wk * c.double())[:, None] * grad_out
        grad_w[:, k] = used * (grad_out * y).sum(1)
        grad_w_magnitude[:, k] = used * (grad_out * y).abs().sum(1)
    return out, grad_x, grad_w, grad_w_magnitude


def assert_dot_products_close(got: torch.Tensor, want: torch.Tensor, magnitude: torch.Tensor) -> None:
    """grad w against its closed form. Each is a dot product of H values that the closed form
    rounds as the library does; only the fp32 products and the order of fp32 additions differ
    (a tree of depth < 32), so each may be off by a few ulps of the sum of its terms'
    magnitudes, not of its value: near zero, cancellation leaves no relative bound, and the
    terms grow with the experts' factor c (up to 8 at world 8). Allowed: 1e-5 of that sum."""
    err = (got - want).abs()
    bound = 1e-5 * magnitude + 1e-6
    if bool((err <= bound).all()):
        return
    i = int(torch.argmax(err / bound))
    raise AssertionError(
        f"grad w: {int((err > bound).sum())} of {err.numel()} off; the worst at flat index {i}: got "
        f"{float(got.view(-1)[i])}, want {float(want.view(-1)[i])} (allowed {float(bound.view(-1)[i]):.3g})"
    )


def attempt(fn, *args, **kwargs) -> Optional[str]:
    """fn's failure as one line (None if it worked), to agree on before anyone raises."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # every kind of failure is a finding to share
        return f"{type(e).__name__}: {e}"[:3000]
    return None


def agree(problem: Optional[str], what: str, group=None) -> None:
    """Collective: every rank raises if any rank had a problem, so that no rank runs on alone
    into a round the others left."""
    problems = all_gather(problem, group)
    failed = {r: p for r, p in enumerate(problems) if p}
    if failed:
        raise AssertionError(f"{what}: " + "\n".join(f"rank {r}: {p}" for r, p in failed.items()))


def describe_shape(shape: Shape) -> str:
    layout = shape.layout + (f"/align {shape.alignment}" if shape.alignment > 1 else "")
    sms = "" if shape.num_sms is None else f" num_sms={shape.num_sms}"
    fp8 = "" if shape.fp8 is None else f" -> {str(shape.fp8)[6:]}"
    host = " host experts" if shape.host_experts else ""
    buffers = f" {shape.buffers} buffers" if shape.buffers > 1 else ""
    return (
        f"E/rank={shape.experts_per_rank} K={shape.topk} H={shape.hidden} T<={shape.max_tokens} "
        f"{str(shape.dtype)[6:]}{fp8} {layout}{sms}{host}{buffers}"
    )


def describe(shape: Shape, spec: Spec) -> str:
    return (
        f"{describe_shape(shape)}; {spec.kind} tokens={list(spec.tokens)} {spec.routing} "
        f"masked={spec.masked} dup={spec.duplicates} int64={spec.int64_ids} seed={spec.seed}"
    )


def check_round(ep, shape, spec, bank, rank, world, device, group=None):
    """Collective: one checked round; every rank raises if any rank's check failed."""
    agree(attempt(run_round, ep, shape, spec, bank, rank, world, device, check=True), describe(shape, spec), group)
