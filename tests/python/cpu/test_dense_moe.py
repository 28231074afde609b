"""The dense MoE reference (moe_a2a.dense_moe) and the local-expert math of the expert-parallel
layer (moe_a2a.layers.expert_swiglu), on the CPU.

The all-to-all itself is simulated in one process: every rank's tokens are laid out per
receiving rank and local expert exactly as dispatch's contract says (packed or padded, rows of
no expert filled with NaN), expert_swiglu runs on them with that rank's slice of the weights,
and a weighted index_add plays combine. Outputs and every gradient (x, router, expert weights,
topk_weights) must match the dense single-device layer, and the NaN rows must reach nothing.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from moe_a2a import dense_moe as dm
from moe_a2a import layers as L


def gen(seed):
    return torch.Generator().manual_seed(seed)


def make_weights(E, H, Fd, dtype=torch.float32, seed=0):
    router, wg, wu, wd = L.init_weights(H, Fd, E, seed, dtype, "cpu")
    return router, wg, wu, wd


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def grad_of(t):
    """t.grad; a rank with no tokens has an empty input that no graph reaches (None), which
    is the same as an empty zero gradient."""
    if t.grad is None and t.numel() == 0:
        return torch.zeros_like(t)
    return t.grad


# --------------------------------------------------------------------------- route


def test_route_picks_the_largest_probabilities():
    x = torch.randn(13, 24, generator=gen(1))
    router = torch.randn(10, 24, generator=gen(2))
    idx, w = dm.route(x, router, 3, normalize=False)
    assert idx.dtype == torch.int64 and w.dtype == torch.float32 and idx.shape == (13, 3)
    probs = torch.softmax(x @ router.t(), dim=-1)
    order = probs.argsort(dim=-1, descending=True)[:, :3]
    assert torch.equal(idx, order)
    torch.testing.assert_close(w, probs.gather(1, order))
    assert bool((w[:, :-1] >= w[:, 1:]).all()), "top-k must come sorted, largest first"
    idx_n, w_n = dm.route(x, router, 3)
    assert torch.equal(idx_n, idx)
    torch.testing.assert_close(w_n.sum(-1), torch.ones(13), rtol=0, atol=1e-6)
    torch.testing.assert_close(w_n, w / w.sum(-1, keepdim=True))


@pytest.mark.parametrize("xdtype", [torch.float32, torch.bfloat16], ids=["x_fp32", "x_bf16"])
def test_route_gradient_is_softmax_over_the_chosen_logits(xdtype):
    """Normalised top-k of a softmax = a softmax over the k chosen logits: an independent
    formula for the value and the gradient w.r.t. x and router_weight."""
    x = leaf(torch.randn(9, 16, generator=gen(3)).to(xdtype))
    router = leaf(torch.randn(8, 16, generator=gen(4)))
    c = torch.randn(9, 4, generator=gen(5))
    idx, w = dm.route(x, router, 4)
    (w * c).sum().backward()
    x2, router2 = leaf(x), leaf(router)
    w2 = torch.softmax((x2.float() @ router2.t()).gather(1, idx), dim=-1)
    (w2 * c).sum().backward()
    torch.testing.assert_close(w, w2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(router.grad, router2.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(
        x.grad.float(), x2.grad.float(), rtol=1e-2 if xdtype == torch.bfloat16 else 1e-4, atol=1e-6
    )
    assert x.grad.dtype == xdtype and router.grad.abs().sum() > 0 and x.grad.float().abs().sum() > 0


def test_route_topk_one_and_empty():
    x = torch.randn(5, 8, generator=gen(6))
    router = torch.randn(4, 8, generator=gen(7))
    idx, w = dm.route(x, router, 1)
    assert torch.equal(w, torch.ones(5, 1))  # normalised: the one chosen expert gets it all
    idx, w = dm.route(x[:0], router, 2)
    assert idx.shape == (0, 2) and w.shape == (0, 2)


def test_route_rejects_bad_arguments():
    x, router = torch.randn(3, 8), torch.randn(4, 8)
    with pytest.raises(ValueError, match="x must be"):
        dm.route(x[0], router, 2)
    with pytest.raises(ValueError, match="router_weight must be"):
        dm.route(x, router[:, :4], 2)
    with pytest.raises(ValueError, match="topk"):
        dm.route(x, router, 5)


# --------------------------------------------------------------------------- dense experts

# (E, K, H, F, T)
DENSE_SHAPES = [(4, 2, 16, 8, 11), (6, 1, 8, 16, 5), (8, 3, 32, 24, 0), (5, 5, 16, 8, 3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", DENSE_SHAPES, ids=lambda s: "E{}K{}H{}F{}T{}".format(*s))
def test_dense_matches_loop(shape, dtype):
    E, K, H, Fd, T = shape
    router, wg, wu, wd = make_weights(E, H, Fd, dtype)
    x = torch.randn(T, H, generator=gen(8)).to(dtype)
    idx, w = dm.route(x, router, K)
    got = dm.swiglu_experts_dense(x, idx, w, wg, wu, wd)
    want = dm.swiglu_experts_dense_loop(x, idx, w, wg, wu, wd)
    assert got.dtype == dtype and got.shape == (T, H)
    # fp32: only the summation order differs; bf16: CPU matmuls of 1 row and of n rows may
    # round an intermediate differently (one bf16 ulp = 2^-8 relative).
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got.float(), want.float(), **tol)
    torch.testing.assert_close(dm.dense_moe(x, router, wg, wu, wd, K), got, rtol=0, atol=0)


def test_dense_gradients_match_loop():
    E, K, H, Fd, T = 6, 2, 16, 8, 9
    router, wg, wu, wd = make_weights(E, H, Fd, seed=1)
    x = torch.randn(T, H, generator=gen(9))
    idx, w0 = dm.route(x, router, K)
    g = torch.randn(T, H, generator=gen(10))
    grads = []
    for fn in (dm.swiglu_experts_dense, dm.swiglu_experts_dense_loop):
        args = [leaf(t) for t in (x, w0, wg, wu, wd)]
        (fn(args[0], idx, *args[1:]) * g).sum().backward()
        grads.append([a.grad for a in args])
    for name, a, b in zip(("x", "topk_weights", "w_gate", "w_up", "w_down"), *grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"grad {n}: {m}")


def test_dense_unused_expert_has_zero_gradient():
    E, H, Fd = 4, 8, 8
    _, wg, wu, wd = make_weights(E, H, Fd)
    wg, wu, wd = leaf(wg), leaf(wu), leaf(wd)
    x = torch.randn(3, H, generator=gen(11))
    idx = torch.tensor([[0, 2], [2, 0], [0, 2]])
    dm.swiglu_experts_dense(x, idx, torch.full((3, 2), 0.5), wg, wu, wd).sum().backward()
    for w in (wg, wu, wd):
        assert w.grad is not None and bool((w.grad[[1, 3]] == 0).all()) and w.grad[[0, 2]].abs().sum() > 0


def test_dense_rejects_bad_arguments():
    _, wg, wu, wd = make_weights(4, 8, 8)
    x = torch.randn(3, 8)
    idx, w = torch.zeros(3, 2, dtype=torch.int64), torch.ones(3, 2)
    with pytest.raises(ValueError, match="w_gate must be"):
        dm.swiglu_experts_dense(torch.randn(3, 16), idx, w, wg, wu, wd)
    with pytest.raises(ValueError, match="w_down must be"):
        dm.swiglu_experts_dense(x, idx, w, wg, wu, wd[:, :, :4])
    with pytest.raises(ValueError, match="outside"):
        dm.swiglu_experts_dense(x, idx + 4, w, wg, wu, wd)
    with pytest.raises(ValueError, match="topk_weights"):
        dm.swiglu_experts_dense(x, idx, w[:, :1], wg, wu, wd)
    with pytest.raises(TypeError, match="one dtype"):
        dm.swiglu_experts_dense(x, idx, w, wg, wu.double(), wd)


# --------------------------------------------------------------------------- simulated all-to-all


def simulate_dispatch(xs, idxs, rank, world, E, layout, capacity, perm_seed):
    """What dispatch delivers to ``rank`` (differentiable w.r.t. the xs): (expert_x, offsets,
    num_tokens, pairs) with pairs[i] = (src rank, src token, k, flat row). Rows inside an
    expert come in a shuffled order (the library leaves it unspecified); rows of no expert
    are NaN."""
    El = E // world
    H, dtype = xs[0].shape[1], xs[0].dtype
    per_expert = [[] for _ in range(El)]
    for s, idx in enumerate(idxs):
        for t, row in enumerate(idx.tolist()):
            for k, e in enumerate(row):
                if e // El == rank:
                    per_expert[e % El].append((s, t, k))
    g = gen(perm_seed)
    per_expert = [[p[i] for i in torch.randperm(len(p), generator=g).tolist()] for p in per_expert]
    counts = [len(p) for p in per_expert]
    nan = float("nan")
    if layout == "packed":
        assert sum(counts) <= capacity
        offsets = [0]
        for n in counts:
            offsets.append(offsets[-1] + n)
        chunks, pairs = [], []
        for e, plist in enumerate(per_expert):
            for i, (s, t, k) in enumerate(plist):
                chunks.append(xs[s][t : t + 1])
                pairs.append((s, t, k, offsets[e] + i))
        chunks.append(torch.full((capacity - sum(counts), H), nan, dtype=dtype))
        expert_x = torch.cat(chunks)
    else:
        assert max(counts) <= capacity
        offsets = [e * capacity for e in range(El + 1)]
        planes, pairs = [], []
        for e, plist in enumerate(per_expert):
            rows = [xs[s][t : t + 1] for s, t, _ in plist]
            rows.append(torch.full((capacity - len(plist), H), nan, dtype=dtype))
            planes.append(torch.cat(rows))
            pairs += [(s, t, k, e * capacity + i) for i, (s, t, k) in enumerate(plist)]
        expert_x = torch.stack(planes)
    return (expert_x, torch.tensor(offsets, dtype=torch.int32), torch.tensor(counts, dtype=torch.int32), pairs)


def simulate_combine(ys, pairs_per_rank, ws, Ts, H, dtype):
    """out[s][t] = sum over (t, k) pairs of ws[s][t, k] * y_row, in fp32, cast to dtype."""
    acc = [torch.zeros(T, H, dtype=torch.float32) for T in Ts]
    for y, pairs in zip(ys, pairs_per_rank):
        flat = y.reshape(-1, H)
        for s, t, k, row in pairs:
            acc[s] = acc[s].index_add(0, torch.tensor([t]), ws[s][t : t + 1, k : k + 1] * flat[row : row + 1].float())
    return [a.to(dtype) for a in acc]


def run_simulated(layout, impl, dtype, world=3, E=6, K=2, H=16, Fd=8, Ts=(7, 0, 5), capacity_extra=3, seed=0):
    """Simulated expert-parallel layer and the dense layer on the same weights and tokens,
    with loss = sum_s (out_s * g_s).sum(). Returns (ep outputs, dense outputs, ep grads, dense
    grads, the expert inputs), grads as dicts name -> tensor (expert weights: all experts)."""
    router, wg, wu, wd = make_weights(E, H, Fd, dtype, seed)
    xs0 = [torch.randn(T, H, generator=gen(100 + s)).to(dtype) for s, T in enumerate(Ts)]
    gs = [torch.randn(T, H, generator=gen(200 + s)) for s, T in enumerate(Ts)]
    El = E // world

    # expert parallel, simulated
    p = {n: leaf(t) for n, t in (("router", router), ("w_gate", wg), ("w_up", wu), ("w_down", wd))}
    xs = [leaf(x) for x in xs0]
    routed = [dm.route(x, p["router"], K) for x in xs]
    idxs, ws = [r[0] for r in routed], [r[1] for r in routed]
    ys, pairs, inputs = [], [], []
    for d in range(world):
        if layout == "packed":
            cap = sum(int((i // El == d).sum()) for i in idxs) + capacity_extra
        else:
            cap = (
                max(int((i == e).sum()) for e in range(d * El, (d + 1) * El) for i in [torch.cat(idxs)])
                + capacity_extra
            )
        ex, offs, counts, pr = simulate_dispatch(xs, idxs, d, world, E, layout, cap, 300 + d)
        sl = slice(d * El, (d + 1) * El)
        y = L.expert_swiglu(ex, offs, counts, p["w_gate"][sl], p["w_up"][sl], p["w_down"][sl], layout, impl=impl)
        assert y.shape == ex.shape and y.dtype == ex.dtype
        ys.append(y)
        pairs.append(pr)
        inputs.append((ex, offs, counts, y))
    outs = simulate_combine(ys, pairs, ws, Ts, H, dtype)
    sum((o.float() * g).sum() for o, g in zip(outs, gs)).backward()
    ep_grads = {n: t.grad for n, t in p.items()}
    ep_grads.update({f"x{s}": grad_of(x) for s, x in enumerate(xs)})

    # dense, every rank's tokens on one device
    q = {n: leaf(t) for n, t in (("router", router), ("w_gate", wg), ("w_up", wu), ("w_down", wd))}
    xd = [leaf(x) for x in xs0]
    dense = [dm.dense_moe(x, q["router"], q["w_gate"], q["w_up"], q["w_down"], K) for x in xd]
    sum((o.float() * g).sum() for o, g in zip(dense, gs)).backward()
    dense_grads = {n: t.grad for n, t in q.items()}
    dense_grads.update({f"x{s}": grad_of(x) for s, x in enumerate(xd)})
    return outs, dense, ep_grads, dense_grads, inputs


SIM_CASES = [
    ("packed", "loop"),
    ("packed", "grouped_mm"),
    ("packed", "auto"),
    ("padded", "bmm"),
    ("padded", "loop"),
    ("padded", "auto"),
]


@pytest.mark.parametrize("layout,impl", SIM_CASES, ids=[f"{a}-{b}" for a, b in SIM_CASES])
def test_simulated_expert_parallel_matches_dense_fp32(layout, impl):
    if impl == "grouped_mm" and not hasattr(torch, "_grouped_mm"):
        pytest.fail("this torch has no torch._grouped_mm; the packed fast path cannot run")
    outs, dense, ep_grads, dense_grads, inputs = run_simulated(layout, impl, torch.float32)
    for s, (o, d) in enumerate(zip(outs, dense)):
        torch.testing.assert_close(o, d, rtol=1e-5, atol=1e-6, msg=lambda m, s=s: f"rank {s} output: {m}")
    for name in dense_grads:
        a, b = ep_grads[name], dense_grads[name]
        assert a is not None and bool(torch.isfinite(a).all()), f"grad {name} is missing or not finite"
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"grad {n}: {m}")
    for ex, offs, counts, y in inputs:
        valid = L.expert_row_mask(offs, counts, ex.reshape(-1, ex.shape[-1]).shape[0])
        flat_y = y.reshape(-1, y.shape[-1])
        assert bool(torch.isfinite(flat_y[valid]).all()), "NaN garbage leaked into an expert's rows"
        if impl != "grouped_mm" and not (impl == "auto" and layout == "packed" and L._grouped_mm_expected(ex)):
            assert bool((flat_y[~valid] == 0).all()), "rows of no expert must be zero"


@pytest.mark.parametrize("layout,impl", [("packed", "loop"), ("packed", "grouped_mm"), ("padded", "bmm")])
def test_simulated_expert_parallel_matches_dense_bf16(layout, impl):
    outs, dense, ep_grads, dense_grads, _ = run_simulated(layout, impl, torch.bfloat16, H=32, Fd=16)
    # Same bf16 roundings in both; only the order of accumulation inside the matmuls (and of
    # the gradient sums) differs, so a few bf16 ulps (2^-8 relative each).
    for o, d in zip(outs, dense):
        torch.testing.assert_close(o.float(), d.float(), rtol=2e-2, atol=2e-2)
    for name in dense_grads:
        a, b = ep_grads[name].float(), dense_grads[name].float()
        assert bool(torch.isfinite(a).all()), f"grad {name} not finite"
        scale = (b.abs().max().item() if b.numel() else 0.0) + 1e-6
        torch.testing.assert_close(a, b, rtol=5e-2, atol=3e-2 * scale, msg=lambda m, n=name: f"grad {n}: {m}")


def test_simulated_every_expert_empty_on_one_rank():
    """Rank 1 receives nothing (every token picks rank 0's experts): empty experts, a packed
    output of only garbage rows, still zero (not missing) weight gradients there."""
    E, H, Fd, world = 4, 8, 8, 2
    _, wg, wu, wd = make_weights(E, H, Fd)
    x = leaf(torch.randn(5, H, generator=gen(12)))
    idx = torch.tensor([[0, 1]] * 5)
    for layout, impl in (("packed", "loop"), ("packed", "grouped_mm"), ("padded", "bmm")):
        p = [leaf(t[2:]) for t in (wg, wu, wd)]
        ex, offs, counts, _ = simulate_dispatch([x], [idx], 1, world, E, layout, 4, 0)
        y = L.expert_swiglu(ex, offs, counts, *p, layout, impl=impl)
        assert counts.tolist() == [0, 0] and y.shape == ex.shape
        y[L.expert_row_mask(offs, counts, 4 if layout == "packed" else 8).view(y.shape[:-1])].sum().backward()
        for w in p:
            assert w.grad is not None and bool((w.grad == 0).all()), f"{layout}/{impl}: weight grad not zero"


# --------------------------------------------------------------------------- expert_swiglu details


def test_expert_row_mask():
    offs = torch.tensor([0, 2, 2, 7], dtype=torch.int32)  # packed, expert 1 empty
    counts = torch.tensor([2, 0, 5], dtype=torch.int32)
    assert L.expert_row_mask(offs, counts, 10).tolist() == [True] * 7 + [False] * 3
    offs = torch.tensor([0, 4, 8, 12], dtype=torch.int32)  # padded, capacity 4
    counts = torch.tensor([1, 0, 4], dtype=torch.int32)
    assert L.expert_row_mask(offs, counts, 12).tolist() == [True, False, False, False] + [False] * 4 + [True] * 4


def test_loop_writes_zeros_and_blocks_gradients_of_unused_rows():
    H, Fd = 8, 8
    _, wg, wu, wd = make_weights(3, H, Fd)
    ex = torch.randn(10, H, generator=gen(13))
    ex[7:] = float("nan")
    ex = leaf(ex)
    offs = torch.tensor([0, 3, 3, 7], dtype=torch.int32)
    counts = torch.tensor([3, 0, 4], dtype=torch.int32)
    y = L.expert_swiglu(ex, offs, counts, wg, wu, wd, "packed", impl="loop")
    assert bool((y[7:] == 0).all()) and bool(torch.isfinite(y[:7]).all())
    y.sum().backward()
    assert bool((ex.grad[7:] == 0).all()) and bool(torch.isfinite(ex.grad).all())
    torch.testing.assert_close(y[3:7], dm._expert_mlp(ex[3:7].detach(), wg[2], wu[2], wd[2]))


def test_padded_masks_nan_garbage_with_where():
    H, Fd, cap = 8, 8, 4
    _, wg, wu, wd = (leaf(t) for t in make_weights(2, H, Fd))
    ex = torch.randn(2, cap, H, generator=gen(14))
    counts = torch.tensor([1, 3], dtype=torch.int32)
    ex[0, 1:] = float("nan")
    ex[1, 3:] = float("inf")
    ex = leaf(ex)
    y = L.expert_swiglu(ex, torch.tensor([0, cap, 2 * cap], dtype=torch.int32), counts, wg, wu, wd, "padded")
    assert bool((y[0, 1:] == 0).all()) and bool((y[1, 3:] == 0).all())
    (y * torch.randn(y.shape, generator=gen(15))).sum().backward()
    for t in (ex, wg, wu, wd):
        assert bool(torch.isfinite(t.grad).all())
    assert bool((ex.grad[0, 1:] == 0).all())


def test_loop_rejects_overlapping_or_out_of_range_experts():
    _, wg, wu, wd = make_weights(2, 8, 8)
    ex = torch.randn(6, 8)
    with pytest.raises(ValueError, match="local expert 1"):
        L.expert_swiglu(
            ex,
            torch.tensor([0, 2, 6], dtype=torch.int32),
            torch.tensor([3, 2], dtype=torch.int32),
            wg,
            wu,
            wd,
            "packed",
            impl="loop",
        )
    with pytest.raises(ValueError, match="outside"):
        L.expert_swiglu(
            ex,
            torch.tensor([0, 2, 9], dtype=torch.int32),
            torch.tensor([2, 7], dtype=torch.int32),
            wg,
            wu,
            wd,
            "packed",
            impl="loop",
        )


def test_expert_swiglu_rejects_bad_arguments():
    _, wg, wu, wd = make_weights(2, 8, 8)
    ex, offs, counts = torch.randn(6, 8), torch.tensor([0, 2, 5], dtype=torch.int32), torch.tensor([2, 3])
    with pytest.raises(ValueError, match="layout must be one of"):
        L.expert_swiglu(ex, offs, counts, wg, wu, wd, "ragged")
    with pytest.raises(ValueError, match="impl must be one of"):
        L.expert_swiglu(ex, offs, counts, wg, wu, wd, "packed", impl="cutlass")
    with pytest.raises(ValueError, match=r"packed expert_x must be \[rows, H\]"):
        L.expert_swiglu(ex.view(2, 3, 8), offs, counts, wg, wu, wd, "packed")
    with pytest.raises(ValueError, match="padded expert_x must be"):
        L.expert_swiglu(ex, offs, counts, wg, wu, wd, "padded")
    with pytest.raises(ValueError, match="w_gate must be"):
        L.expert_swiglu(torch.randn(6, 16), offs, counts, wg, wu, wd, "packed")
    with pytest.raises(ValueError, match="expert_num_tokens must be"):
        L.expert_swiglu(ex, offs, counts[:1], wg, wu, wd, "packed")
    with pytest.raises(ValueError, match="expert_offsets must be"):
        L.expert_swiglu(ex, offs[:2], counts, wg, wu, wd, "packed")
    with pytest.raises(TypeError, match="expert weights are"):
        L.expert_swiglu(ex.double(), offs, counts, wg, wu, wd, "packed")
    with pytest.raises(ValueError, match="needs the packed layout"):
        L.expert_swiglu(ex.view(2, 3, 8), offs, counts, wg, wu, wd, "padded", impl="grouped_mm")
    with pytest.raises(ValueError, match="needs the padded layout"):
        L.expert_swiglu(ex, offs, counts, wg, wu, wd, "packed", impl="bmm")
    with pytest.raises(ValueError, match="padded expert_x has 3 experts"):
        L.expert_swiglu(torch.randn(3, 2, 8), offs, counts, wg, wu, wd, "padded")


def test_auto_uses_the_loop_off_cuda():
    assert not L._grouped_mm_expected(torch.randn(4, 8).to(torch.bfloat16))


# --------------------------------------------------------------------------- weights and the layer's arguments


def test_init_weights_deterministic_and_sliceable():
    H, Fd, E = 16, 8, 6
    full = L.ExpertParallelMoE.init_full_weights(H, Fd, E, 7, torch.bfloat16, "cpu")
    again = L.init_weights(H, Fd, E, 7, torch.bfloat16, "cpu")
    part = L.init_weights(H, Fd, E, 7, torch.bfloat16, "cpu", experts=[2, 3])
    router, wg, wu, wd = full
    assert router.dtype == torch.float32 and router.shape == (E, H)
    assert wg.dtype == wu.dtype == wd.dtype == torch.bfloat16
    assert wg.shape == (E, H, Fd) and wu.shape == (E, H, Fd) and wd.shape == (E, Fd, H)
    for a, b in zip(full, again):
        assert torch.equal(a, b)
    assert torch.equal(part[0], router)
    for a, b in zip(full[1:], part[1:]):
        assert torch.equal(a[2:4], b), "a rank's slice must equal the full weights' slice"
    other = L.init_weights(H, Fd, E, 8, torch.bfloat16, "cpu")
    assert not torch.equal(other[1], wg)
    assert not torch.equal(wg, wu), "gate and up must be different draws"
    big = L.init_weights(256, 128, 2, 0, torch.float32, "cpu")
    for t, fan_in in ((big[0], 256), (big[1], 256), (big[2], 256), (big[3], 128)):
        assert abs(t.std().item() * fan_in**0.5 - 1) < 0.05, "std must be 1/sqrt(fan_in)"
    with pytest.raises(ValueError, match="outside"):
        L.init_weights(H, Fd, E, 0, torch.float32, "cpu", experts=[6])


@pytest.mark.parametrize(
    "kwargs,err,match",
    [
        (dict(layout="ragged"), ValueError, "layout must be one of"),
        (dict(dtype=torch.int8), TypeError, "dtype must be one of"),
        (dict(hidden_dim=0), ValueError, "hidden_dim must be a positive int"),
        (dict(experts_per_token=9), ValueError, "experts_per_token"),
        (dict(max_recv_tokens_per_expert=4), ValueError, "for layout='padded'"),
        (dict(layout="padded", max_recv_tokens=4), ValueError, "for layout='packed'"),
        (dict(), RuntimeError, "torch.distributed initialised"),
    ],
)
def test_layer_argument_errors_without_a_process_group(kwargs, err, match):
    args = dict(hidden_dim=16, ffn_dim=8, num_experts=8, experts_per_token=2, max_num_tokens=4)
    args.update(kwargs)
    with pytest.raises(err, match=match):
        L.ExpertParallelMoE(**args)


def test_modules_import_without_the_extension():
    python_dir = Path(__file__).resolve().parents[3] / "python"
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import moe_a2a.layers, moe_a2a.dense_moe\n"
        "from moe_a2a.layers import ExpertParallelMoE, expert_swiglu\n"
        "assert 'moe_a2a._C' not in sys.modules, 'the extension was imported'\n"
        "print('ok')\n"
    ) % str(python_dir)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
