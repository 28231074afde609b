"""dispatch / combine under torch.autograd, against closed-form gradients.

With the experts replaced by y = c_r * x on rank r (c_r = 1 + r), one forward round gives
    out[t]       = sum_k w[t,k] * c(t,k) * x[t]         c(t,k) = c of the rank owning expert (t,k)
so for a loss sum(out * g):
    grad x[t]    = sum_k w[t,k] * c(t,k) * g[t]          (dispatch's backward: rows summed home)
    grad w[t,k]  = c(t,k) * <g[t], x[t]>                 (combine's backward: dot products home)
Each rank checks its own tokens against these, computed in float64 on the CPU
(mixed_rounds.closed_form, shared with the soak and fuzz rounds). grad w is a dot product over
H channels of rows that the experts rounded to the token type (c * x is not exact in bf16 for
c = 3, 5, 6, 7, i.e. from world 3 on), so the closed form uses the rounded rows and grad w's
tolerance scales with the sum of the magnitudes of the dot product's terms.
"""

import warnings

import hooks
import pytest
import torch
import torch.distributed as dist
from conftest import meet
from mixed_rounds import assert_dot_products_close, closed_form

import moe_a2a
from moe_a2a import reference as ref

CASES = [("padded", torch.float32), ("packed", torch.float32), ("padded", torch.bfloat16), ("packed", torch.bfloat16)]
# fp32 transport: sums of a few fp32 products. bf16: the rows themselves are rounded to bf16
# (8 bits of mantissa) on the way and the dot products see bf16 inputs.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def one_round(ep, x, idx, w, rank):
    d = ep.dispatch(x, idx, w)
    return ep.combine(d.expert_x * (1.0 + rank), d), d


# Each rank's token count: drawn (random), rank 0 with none, or rank 0 with 4x the others' (with few
# blocks, so large groups, it sends them its output gradients in sub-ranges, EpConfig::grad_subranges,
# while they send it whole groups).
TOKEN_COUNTS = ("random", "rank0_empty", "rank0_large")


def token_counts(tokens, world, T):
    return {"random": None, "rank0_empty": [0] + [T] * (world - 1), "rank0_large": [T] + [T // 4] * (world - 1)}[tokens]


# (hidden, num_sms, topk) of the backward of combine's ways to answer a row: one token a group and
# one chunk a row; one token a group, its rows' chunks split into tasks and the weight gradient
# summed over them; 12 tokens a group on 2 blocks, the group's own rows answered while it is sent;
# the same with top-8 of 8 experts a rank, so that many rows have more k's on one rank
# than answer_row_chunks loads at once (kGradsInFlight, 4) and take two passes.
GRIDS = {
    "one-chunk": (512, None, 4),
    "rows-in-parts": (2048, None, 4),
    "own-rows-while-sending": (2048, 2, 4),
    "more-k-than-in-flight": (2048, 2, 8),
}


@pytest.mark.parametrize("layout,dtype", CASES, ids=[f"{lay}-{str(d)[6:]}" for lay, d in CASES])
@pytest.mark.parametrize("tokens", TOKEN_COUNTS)
@pytest.mark.parametrize("grid", list(GRIDS))
def test_gradients_match_closed_form(layout, dtype, tokens, grid, world, rank):
    H, num_sms, K = GRIDS[grid]
    E, T = 8 * world, 24
    counts = token_counts(tokens, world, T)
    inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=71, num_tokens=counts)
    inputs = [ref.Routing(r.x.float().to(dtype), r.topk_idx, r.topk_weights) for r in inputs]
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, layout=layout, num_sms=num_sms) as ep:
        check_rounds_against_closed_form(ep, inputs, lambda *a: one_round(*a)[0], E // world, dtype, rank)


def check_rounds_against_closed_form(ep, inputs, round_fn, experts_per_rank, dtype, rank, steps=3):
    """`steps` forward rounds out = round_fn(ep, x, topk_idx, topk_weights, rank), each followed by
    its backward (loss sum(out * g)), this rank's out, grad x and grad w against the closed form.
    Several: the backward rounds must leave the AllToAll ready for the next forward."""
    for step in range(steps):
        x = inputs[rank].x.cuda().requires_grad_()
        w = inputs[rank].topk_weights.cuda().requires_grad_()
        g = torch.randn(x.shape, generator=torch.Generator().manual_seed(100 * step + rank)).to(dtype)
        out = round_fn(ep, x, inputs[rank].topk_idx.cuda(), w, rank)
        (out.float() * g.cuda().float()).sum().backward()
        ep.synchronize()
        want_out, want_gx, want_gw, gw_magnitude = closed_form(inputs[rank], g, experts_per_rank, dtype)
        torch.testing.assert_close(out.detach().cpu().double(), want_out, **TOL[dtype])
        torch.testing.assert_close(x.grad.cpu().double(), want_gx, **TOL[dtype])
        assert_dot_products_close(w.grad.cpu().double(), want_gw, gw_magnitude)


def test_router_gradient_without_input_gradient(world, rank):
    """x without a gradient, topk_weights with one (a trainable router over fixed inputs): w's
    gradient comes from combine, x gets none, and no torch autograd-fallback warning is raised
    on the way (the ops have no autograd kernel; reaching the fallback's grad_fn warns, and
    torch says it will stop working)."""
    E, K, H, T = 8 * world, 4, 512, 24
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=73)
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, layout="packed") as ep:
        x = inputs[rank].x.cuda()
        w = inputs[rank].topk_weights.cuda().requires_grad_()
        g = torch.randn(x.shape, generator=torch.Generator().manual_seed(rank))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out, _ = one_round(ep, x, inputs[rank].topk_idx.cuda(), w, rank)
            (out * g.cuda()).sum().backward()
            ep.synchronize()
        fallback = [str(c.message) for c in caught if "autograd kernel was not registered" in str(c.message)]
        assert not fallback, f"torch's autograd fallback was reached: {fallback[0][:200]}"
        _, _, want_gw, gw_magnitude = closed_form(inputs[rank], g, E // world, torch.float32)
        assert_dot_products_close(w.grad.cpu().double(), want_gw, gw_magnitude)
        assert x.grad is None


def test_dropped_pairs_get_zero_weight_gradients(world, rank):
    """A dispatch past an expert's capacity drops pairs (and reports it). The backward of combine
    answers each dropped pair with a weight gradient of 0 (it had no output), the others with
    theirs, and the token side, which awaits a flagged word for every used pair, never waits for
    one that does not come. A first round that fits leaves its words behind first. The second
    round is queued behind a GPU busy-wait: a call that starts a round raises what earlier rounds
    reported, so without it the backward call would raise the overflow before its kernel ran (as
    it does in eager use; inside a CUDA graph nothing is checked until synchronize)."""
    E, K, H, T = 8 * world, 2, 512, 32
    limit = 2 * world  # one token a rank fits; every token to experts 0 and 1 does not
    fits = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=74, num_tokens=1)
    base = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=75, num_tokens=T)
    full = [ref.Routing(r.x, torch.arange(K, dtype=torch.int32).repeat(r.x.shape[0], 1), r.topk_weights) for r in base]
    g = torch.randn(T, H, generator=torch.Generator().manual_seed(76 + rank))
    g_cuda = g.cuda()  # before the busy-wait: a copy from pageable memory synchronizes, which would end it
    with moe_a2a.AllToAll(
        dist.group.WORLD, E, K, H, T, torch.float32, layout="packed", max_recv_tokens=limit, timeout_s=5.0
    ) as ep:
        for inputs in (fits, full):
            x, idx = inputs[rank].x.cuda(), inputs[rank].topk_idx.cuda()
            w = inputs[rank].topk_weights.cuda().requires_grad_()
            if inputs is full:
                ep.synchronize()  # the first round is clean
                torch.cuda._sleep(1_000_000_000)  # about 0.5 s: the round and its backward are queued first
            out, _ = one_round(ep, x, idx, w, rank)
            (out * g_cuda[: x.shape[0]]).sum().backward()
        check_dropped_pairs(ep, w, full[rank], g, E // world)


def check_dropped_pairs(ep, w, inputs, g, experts_per_rank):
    """After a round that dropped pairs at dispatch and its backward: the overflow is raised, w's
    gradient is 0 for some pairs (the dropped ones) and the closed form's for the others."""
    with pytest.raises(RuntimeError, match="capacity|max_recv_tokens|reported an error"):
        ep.synchronize()
    _, _, want_gw, gw_magnitude = closed_form(inputs, g, experts_per_rank, torch.float32)
    got = w.grad.cpu().double()
    dropped = got == 0
    assert bool(dropped.any()), "no pair was dropped: the test's capacity does not bind"
    assert_dot_products_close(torch.where(dropped, want_gw, got), want_gw, gw_magnitude)


def test_a_pair_no_expert_answers_times_out_naming_a_peer(world, rank):
    """Rank 0 passes back a route that says a slot is used where its dispatch left it unused
    (topk_idx -1): no expert answers that pair, so rank 0's backward of combine awaits the pair's
    weight gradient, a flagged word, in vain. The wait is bounded, and its error names the round's
    epoch and "a peer" (the token side does not know which rank would answer a pair), not a rank
    -1 or a flag taken for an epoch. The other ranks' backward ends normally."""
    E, K, H, T = 8 * world, 2, 512, 4
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=77, num_tokens=T)[rank]
    g = torch.randn(T, H, generator=torch.Generator().manual_seed(78 + rank)).cuda()
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, timeout_s=1.0) as ep:
        x, idx = inputs.x.cuda(), inputs.topk_idx.cuda()
        idx[0, 1] = -1  # token 0's slot 1 unused: its dest_mask says so, and no expert gets the pair
        w = inputs.topk_weights.cuda().requires_grad_()
        out, d = one_round(ep, x, idx, w, rank)
        if rank == 0:  # the route saved for the backward, after combine read it: slot 1 said used
            d._route.dest_mask.data[0] &= ~(1 << (hooks.hooked_ext().UNUSED_SLOT_BIT + 1))
        (out * g).sum().backward()
        try:
            if rank == 0:
                with pytest.raises(
                    RuntimeError,
                    match=r"timed out in combine-backward waiting for a peer's weight gradients of token group 0 "
                    r"\(epoch [1-9]\)",
                ):
                    ep.synchronize()
            else:
                ep.synchronize()
        finally:
            meet()  # also when a rank's check failed: no rank is left waiting for it


@pytest.mark.parametrize("tokens", TOKEN_COUNTS)
def test_backwards_of_combine_back_to_back(tokens, world, rank):
    """Two layers over fixed inputs with trainable routers: the backward runs two backwards of
    combine in a row, with no backward of dispatch between them (whose senders wait for every
    rank's start). With rank 0 empty in both, its peers signal its token group 0 first thing in
    each round (protocol.md, "Why nothing is overwritten too early"), so rank 0 may find the
    second round's signal while it waits for the first's: both rounds' gradients must still be
    right, and no wait may hang."""
    E, K, H, T = 8 * world, 4, 512, 24
    counts = token_counts(tokens, world, T)
    layers = [ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=s, num_tokens=counts) for s in (77, 78)]
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32) as ep:
        ws = [inp[rank].topk_weights.cuda().requires_grad_() for inp in layers]
        gs = [
            torch.randn(inp[rank].x.shape, generator=torch.Generator().manual_seed(80 + i + 7 * rank))
            for i, inp in enumerate(layers)
        ]
        outs = [one_round(ep, inp[rank].x.cuda(), inp[rank].topk_idx.cuda(), w, rank)[0] for inp, w in zip(layers, ws)]
        sum((o * g.cuda()).sum() for o, g in zip(outs, gs)).backward()
        ep.synchronize()
        for inp, w, g in zip(layers, ws, gs):
            _, _, want_gw, gw_magnitude = closed_form(inp[rank], g, E // world, torch.float32)
            assert_dot_products_close(w.grad.cpu().double(), want_gw, gw_magnitude)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_each_rank_asks_for_its_own_weight_gradients(dtype, world, rank):
    """A rank whose topk_weights need no gradient tells the expert ranks (its grad signal), and
    they skip its dot products and their read of expert_y. Rounds where the even ranks ask, then
    the odd ones, then none, then all: a rank that asked gets the closed form, one that did not
    gets None, and x's gradient is right on every rank in every round (the rows' gradients do
    not depend on who asked; a weight gradient after a round that computed none is fresh)."""
    E, K, H, T = 8 * world, 4, 512, 24
    inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=74)
    inputs = [ref.Routing(r.x.float().to(dtype), r.topk_idx, r.topk_weights) for r in inputs]
    asks_in_round = [rank % 2 == 0, rank % 2 == 1, False, True]
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, layout="packed") as ep:
        for step, asks in enumerate(asks_in_round):
            x = inputs[rank].x.cuda().requires_grad_()
            w = inputs[rank].topk_weights.cuda().requires_grad_(asks)
            g = torch.randn(x.shape, generator=torch.Generator().manual_seed(100 * step + rank)).to(dtype)
            out, _ = one_round(ep, x, inputs[rank].topk_idx.cuda(), w, rank)
            (out.float() * g.cuda().float()).sum().backward()
            ep.synchronize()
            _, want_gx, want_gw, gw_magnitude = closed_form(inputs[rank], g, E // world, dtype)
            torch.testing.assert_close(x.grad.cpu().double(), want_gx, **TOL[dtype])
            if asks:
                assert_dot_products_close(w.grad.cpu().double(), want_gw, gw_magnitude)
            else:
                assert w.grad is None, f"round {step}: rank {rank} asked for no weight gradient but got one"


@pytest.mark.parametrize("layout,alignment", [("padded", 1), ("packed", 1), ("packed", 4)])
def test_rows_an_experts_gemm_reads_get_the_right_gradient(layout, alignment, world, rank):
    """Every row an expert's GEMM reads gets its exact gradient: the router weight of its
    (token, k) times grad_out for a row of an expert, 0 for a row of no expert inside what the
    GEMM reads (padded: past an expert's count; packed: the alignment padding of a segment),
    whatever garbage the memory held (the allocator's cache is filled with NaN first). Packed
    rows past the last segment are read by no expert and are undefined, as in expert_x."""
    E, K, H, T = 4 * world, 2, 256, 8
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=72)
    # Default capacities are the worst case, so both layouts leave rows of no expert here.
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, layout=layout, expert_alignment=alignment) as ep:
        x, idx, w = (t.cuda() for t in inputs[rank])
        d = ep.dispatch(x, idx, w)
        y = d.expert_x.clone().requires_grad_()
        out = ep.combine(y, d)
        grad_out = torch.ones_like(out)
        garbage = torch.full_like(y, float("nan"))
        del garbage  # the gradient's allocation reuses this NaN-filled block of the allocator's cache
        (grad_y,) = torch.autograd.grad(out, y, grad_out)
        ep.synchronize()
        flat = grad_y.reshape(-1, H)
        used = torch.zeros(flat.shape[0], dtype=torch.bool, device=flat.device)
        read = torch.zeros_like(used)  # the rows an expert's GEMM reads
        offsets, counts = d.expert_offsets.tolist(), d.expert_num_tokens.tolist()
        for e, (o, n) in enumerate(zip(offsets, counts)):
            used[o : o + n] = True
            read[o : offsets[e + 1] if layout == "packed" else o + ep.capacity] = True
        assert (read & ~used).any() or (layout == "packed" and alignment == 1), "the test has no row to check"
        assert not flat[read & ~used].any(), "rows of no expert that a GEMM reads got a nonzero gradient"
        # Used rows: the router weight of that (token, k) times a row of ones.
        want = d.expert_weights.reshape(-1)[used].unsqueeze(1).expand(-1, H)
        torch.testing.assert_close(flat[used], want)


def test_two_layers_share_one_all_to_all(world, rank):
    """Two dispatch/combine pairs in one forward, one backward: rounds run forward 1, 2, then
    backward of 2 (combine, dispatch), then of 1, in the same order on every rank."""
    E, K, H, T = 8 * world, 2, 256, 16
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=73)
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32) as ep:
        x0, idx, w = (t.cuda() for t in inputs[rank])
        x = x0.clone().requires_grad_()
        h, _ = one_round(ep, x, idx, w, rank)
        out, _ = one_round(ep, h, idx, w, rank)
        out.sum().backward()
        ep.synchronize()
        # Both layers scale token t by s[t] = sum_k w c, so out = s^2 x and grad x = s^2.
        scale = 1.0 + torch.div(idx, E // world, rounding_mode="floor").float()
        s = (w * scale).sum(1, keepdim=True)
        torch.testing.assert_close(out.detach(), s * s * x0, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x.grad, (s * s).expand_as(x0), rtol=1e-5, atol=1e-5)


def test_experts_that_do_not_read_expert_x(world, rank):
    """Two layers, each out = in + combine(experts(dispatch(in))); in the second, the last rank's
    experts make expert_y without reading expert_x (transformers' experts on a rank that got no
    row return a fresh zero tensor). Without a path to expert_x autograd skips that rank's second
    backward of dispatch (here its backward of combine too: nothing else of the round needs a
    gradient), so its rounds fall out of step with its peers' and they time out in the first layer's
    (4 x H100, session 15, in a transformers model). Through combine's edge to expert_x every rank
    runs both rounds of each layer, in order, and the gradient is the closed form: each layer scales
    token t by 1 + sum_k w c(k), with c = 0 for the last rank's experts in the second layer."""
    E, K, H, T = 8 * world, 2, 256, 16
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=79)
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, layout="packed") as ep:
        x0, idx, w = (t.cuda() for t in inputs[rank])
        x = x0.clone().requires_grad_()
        h = x + one_round(ep, x, idx, w, rank)[0]
        d = ep.dispatch(h, idx, w)
        last = rank == world - 1
        out = h + ep.combine(torch.zeros_like(d.expert_x) if last else d.expert_x * (1.0 + rank), d)
        out.sum().backward()
        ep.synchronize()
        owner = torch.div(idx, E // world, rounding_mode="floor")
        c = 1.0 + owner.float()
        s1 = 1.0 + (w * c).sum(1, keepdim=True)
        s2 = 1.0 + (w * torch.where(owner == world - 1, 0.0, c)).sum(1, keepdim=True)
        torch.testing.assert_close(out.detach(), s1 * s2 * x0, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x.grad, (s1 * s2).expand_as(x0), rtol=1e-5, atol=1e-5)


def test_split_calls_refuse_to_drop_gradients(world, rank):
    E, K, H, T = 4 * world, 2, 256, 8
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=74)
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32) as ep:
        x, idx, w = (t.cuda() for t in inputs[rank])
        with pytest.raises(RuntimeError, match="not differentiable"):
            ep.dispatch_send(x.clone().requires_grad_(), idx, w)
        d = ep.dispatch_recv(ep.dispatch_send(x, idx, w))
        out = ep.combine_recv(ep.combine_send(d.expert_x * (1.0 + rank), d))
        ep.synchronize()
        torch.testing.assert_close(
            out,
            ref.moe_reference([ref.Routing(*(t.cuda() for t in r)) for r in inputs], rank, E, world),
            rtol=1e-5,
            atol=1e-5,
        )


def test_two_rounds_in_flight_backward(world, rank):
    """num_buffers=2, two micro-batches: dispatch both, combine both, one backward through
    both; each round's backward runs on its own buffer. Gradients match the closed form."""
    E, K, H, T = 8 * world, 4, 512, 24
    inputs = [ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=s) for s in (75, 76)]
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, num_buffers=2) as ep:
        xs = [inp[rank].x.cuda().requires_grad_() for inp in inputs]
        ws = [inp[rank].topk_weights.cuda().requires_grad_() for inp in inputs]
        ds = [ep.dispatch(x, inp[rank].topk_idx.cuda(), w) for x, inp, w in zip(xs, inputs, ws)]
        outs = [ep.combine(d.expert_x * (1.0 + rank), d) for d in ds]
        gs = [
            torch.randn(x.shape, generator=torch.Generator().manual_seed(90 + i + 7 * rank)) for i, x in enumerate(xs)
        ]
        sum((o * g.cuda()).sum() for o, g in zip(outs, gs)).backward()
        ep.synchronize()
        for inp, x, w, out, g in zip(inputs, xs, ws, outs, gs):
            want_out, want_gx, want_gw, gw_magnitude = closed_form(inp[rank], g, E // world, torch.float32)
            torch.testing.assert_close(out.detach().cpu().double(), want_out, **TOL[torch.float32])
            torch.testing.assert_close(x.grad.cpu().double(), want_gx, **TOL[torch.float32])
            assert_dot_products_close(w.grad.cpu().double(), want_gw, gw_magnitude)


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_training_step_replays_in_a_cuda_graph(layout, world, rank):
    """A training step captured whole in one CUDA graph (forward, loss, backward: how torch's
    whole-network capture and training engines that graph their layers run it), then replayed on
    new tokens, routes, router weights and output gradients copied into its static inputs: every
    replay's output and gradients match the closed form, and an eager step after the replays
    still does (the rounds' epochs live on the GPU, so replays and eager rounds mix)."""
    E, K, H, T = 8 * world, 4, 512, 24
    dtype = torch.float32
    first = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=94, num_tokens=T)
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, layout=layout) as ep:
        sx = first[rank].x.cuda().requires_grad_()
        sw = first[rank].topk_weights.cuda().requires_grad_()
        sidx, sg = first[rank].topk_idx.cuda(), torch.zeros(T, H, device="cuda")

        def step():
            out, _ = one_round(ep, sx, sidx, sw, rank)
            (out * sg).sum().backward()
            return out.detach()

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up outside capture (autograd's streams and accumulators)
                step()
                sx.grad = sw.grad = None
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = step()
        static_gx, static_gw = sx.grad, sw.grad  # written by every replay, not accumulated
        for seed in (95, 96, 97):
            inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=seed, num_tokens=T)
            g = torch.randn(T, H, generator=torch.Generator().manual_seed(seed + 7 * rank))
            with torch.no_grad():
                sx.copy_(inputs[rank].x), sidx.copy_(inputs[rank].topk_idx), sw.copy_(inputs[rank].topk_weights)
                sg.copy_(g)
            graph.replay()
            ep.synchronize()
            want_out, want_gx, want_gw, gw_magnitude = closed_form(inputs[rank], g, E // world, dtype)
            torch.testing.assert_close(static_out.cpu().double(), want_out, **TOL[dtype], msg=f"seed {seed}: out")
            torch.testing.assert_close(static_gx.cpu().double(), want_gx, **TOL[dtype], msg=f"seed {seed}: grad x")
            assert_dot_products_close(static_gw.cpu().double(), want_gw, gw_magnitude)
        sx.grad = sw.grad = None
        eager_out = step()
        ep.synchronize()
        want_out, want_gx, want_gw, gw_magnitude = closed_form(inputs[rank], g, E // world, dtype)
        torch.testing.assert_close(eager_out.cpu().double(), want_out, **TOL[dtype])
        torch.testing.assert_close(sx.grad.cpu().double(), want_gx, **TOL[dtype])
        assert_dot_products_close(sw.grad.cpu().double(), want_gw, gw_magnitude)
