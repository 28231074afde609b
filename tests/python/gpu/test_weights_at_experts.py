"""The router weights applied at the experts (AllToAll(weights_at_experts=True);
docs/design/weights-at-experts.md): combine sums the rows unweighted, d.expert_weights is
differentiable, and the backward of dispatch carries each pair's weight gradient home as a
flagged word, where the backward of combine computed it before.

The experts here are y = w(row) * c_r * x on rank r (c_r = 1 + r), the weight applied by the
expert: the same out, grad x and grad w as test_autograd.py's experts with a weighted combine,
so the same closed form (mixed_rounds.closed_form) checks them. grad w is now the expert's own
dot product <grad y, c x> over H values, summed in float32 by torch's autograd instead of by the
backward of combine, with the same bound (assert_dot_products_close).
"""

import pytest
import torch
import torch.distributed as dist
from mixed_rounds import assert_dot_products_close, closed_form
from test_autograd import CASES, TOKEN_COUNTS, TOL, check_dropped_pairs, check_rounds_against_closed_form, token_counts

import moe_a2a
from moe_a2a import reference as ref
from moe_a2a.layers import ExpertParallelMoE


def weighted_at_experts(ep, x, idx, w, rank):
    """One forward round whose experts apply the router weights: y = w(row) * c_r * x."""
    d = ep.dispatch(x, idx, w)
    rows = d.expert_x * (1.0 + rank)
    y = (rows * d.expert_weights.unsqueeze(-1)).to(rows.dtype)  # rows of no expert: undefined, never read
    return ep.combine(y, d)


# (tokens a rank, hidden, num_sms, counts) of the combine kernel's ways of carrying the words: a few
# tokens (flagged partial sums, groups split into parts: only the part that holds chunk 0 sends a
# pair's word), with each of test_autograd's count patterns; and from kOwnRowsDirectTokens (1024)
# tokens on with every rank alike, this rank's own rows summed on the token side, whose own pairs'
# words it writes itself.
PATHS = {f"flagged-parts-{tokens}": (24, 2048, None, tokens) for tokens in TOKEN_COUNTS}
PATHS["own-rows-direct"] = (1100, 256, 8, "equal")


@pytest.mark.parametrize("layout,dtype", CASES, ids=[f"{lay}-{str(d)[6:]}" for lay, d in CASES])
@pytest.mark.parametrize("path", list(PATHS))
def test_gradients_match_closed_form(layout, dtype, path, world, rank):
    T, H, num_sms, tokens = PATHS[path]
    E, K = 8 * world, 4
    counts = [T] * world if tokens == "equal" else token_counts(tokens, world, T)
    inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=91, num_tokens=counts)
    inputs = [ref.Routing(r.x.float().to(dtype), r.topk_idx, r.topk_weights) for r in inputs]
    with moe_a2a.AllToAll(
        dist.group.WORLD, E, K, H, T, dtype, layout=layout, num_sms=num_sms, weights_at_experts=True
    ) as ep:
        check_rounds_against_closed_form(ep, inputs, weighted_at_experts, E // world, dtype, rank)


def test_each_rank_asks_for_its_own_weight_gradients(world, rank):
    """Rank 0's router is frozen (topk_weights need no gradient), the others' are not: every
    expert rank still sends rank 0's pairs their words, which rank 0 leaves unread, and the next
    rounds, which read words again, take only their own (each word carries its round's flag)."""
    E, K, H, T = 8 * world, 4, 512, 24
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=93)
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, weights_at_experts=True) as ep:
        for step in range(2):
            x = inputs[rank].x.cuda().requires_grad_()
            w = inputs[rank].topk_weights.cuda().requires_grad_(rank != 0 or step == 1)
            g = torch.randn(x.shape, generator=torch.Generator().manual_seed(10 * step + rank))
            out = weighted_at_experts(ep, x, inputs[rank].topk_idx.cuda(), w, rank)
            (out * g.cuda()).sum().backward()
            ep.synchronize()
            _, want_gx, want_gw, gw_magnitude = closed_form(inputs[rank], g, E // world, torch.float32)
            torch.testing.assert_close(x.grad.cpu().double(), want_gx, **TOL[torch.float32])
            if w.requires_grad:
                assert_dot_products_close(w.grad.cpu().double(), want_gw, gw_magnitude)
            else:
                assert w.grad is None


def test_dropped_pairs_get_zero_weight_gradients(world, rank):
    """Pairs dropped at dispatch (an expert's rows full) had no output: the backward of dispatch
    sends each a weight gradient of 0, and the token side, which awaits a word for every used
    pair, never waits for one that does not come (test_autograd.py's test of the same for the
    backward of combine says why the round is queued behind a busy-wait)."""
    E, K, H, T = 8 * world, 2, 512, 32
    limit = 2 * world  # one token a rank fits; every token to experts 0 and 1 does not
    base = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=95, num_tokens=T)
    full = [ref.Routing(r.x, torch.arange(K, dtype=torch.int32).repeat(r.x.shape[0], 1), r.topk_weights) for r in base]
    g = torch.randn(T, H, generator=torch.Generator().manual_seed(96 + rank))
    g_cuda = g.cuda()  # before the busy-wait: a copy from pageable memory synchronizes, which would end it
    with moe_a2a.AllToAll(
        dist.group.WORLD, E, K, H, T, torch.float32, layout="packed", max_recv_tokens=limit, weights_at_experts=True
    ) as ep:
        x, idx = full[rank].x.cuda(), full[rank].topk_idx.cuda()
        w = full[rank].topk_weights.cuda().requires_grad_()
        torch.cuda._sleep(1_000_000_000)  # about 0.5 s: the round and its backward are queued first
        out = weighted_at_experts(ep, x, idx, w, rank)
        (out * g_cuda).sum().backward()
        check_dropped_pairs(ep, w, full[rank], g, E // world)


@pytest.mark.parametrize("layout", ["packed", "padded"])
def test_layer_matches_weights_at_combine(layout, world, rank):
    """ExpertParallelMoE with the weights at the experts against the same layer with a weighted
    combine, float32: the same output and the same gradients of x, of the router and of every
    expert weight (the layer masks the weights of rows of no expert, which would reach w_down's
    gradient through the alignment rows)."""
    E, K, H, F, T = 4 * world, 2, 256, 128, 16
    x = torch.randn(T, H, generator=torch.Generator().manual_seed(97 + rank)).cuda()
    g = torch.randn(T, H, generator=torch.Generator().manual_seed(98 + rank)).cuda()
    results = []
    for at_experts in (False, True):
        with ExpertParallelMoE(
            H, F, E, K, T, dtype=torch.float32, layout=layout, init_seed=5, weights_at_experts=at_experts
        ) as layer:
            xi = x.clone().requires_grad_()
            out = layer(xi)
            (out * g).sum().backward()
            layer.ep.synchronize()
            grads = [p.grad.clone() for p in (layer.router_weight, layer.w_gate, layer.w_up, layer.w_down)]
            results.append((out.detach(), xi.grad, *grads))
    names = ("out", "grad x", "grad router", "grad w_gate", "grad w_up", "grad w_down")
    for name, got, want in zip(names, results[1], results[0]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
