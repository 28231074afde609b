"""ExpertParallelMoE (moe_a2a.layers) against the dense single-GPU MoE (moe_a2a.dense_moe), on
every GPU of the node:

    torchrun --nproc-per-node=<GPUs> -m pytest tests/python/gpu/test_moe_layer.py -q

Every rank builds every rank's tokens from one seed and the weights of ALL experts from the
layer's init seed (ExpertParallelMoE.init_full_weights), so it can run the dense layer itself:
on its own tokens for the output and the gradients of x and topk_weights, and on all ranks'
tokens (loss = sum over ranks r of (out_r * g_r).sum()) for the gradients of its expert
weights and of the router (summed over ranks). Routing goes through dense_moe.route in both,
per rank's tokens, so both pick the same experts bit for bit.

Tolerances:
- float32: the only differences are the order of fp32 sums (inside the matmuls, in combine, in
  the gradient reductions), ~1e-6 relative; checked at rtol 1e-4 with atol 1e-4 x the largest
  reference value (so entries that cancel to ~0 are judged on the tensor's scale).
- bfloat16: both sides round the same intermediates to bf16 (gate, up, SiLU product, expert
  output), but the GEMMs may accumulate in another order, so an intermediate can land one bf16
  ulp (2^-8 relative) apart and carry on. Outputs: rtol 2e-2 and atol 2e-2 x the reference's
  RMS (about 5x the few-ulp differences expected), plus a relative L2 error <= 1e-2.
  Gradients (more roundings, and the dense backward sums a token's k rows in bf16): rtol 5e-2,
  atol 5e-2 x the largest reference value, relative L2 error <= 3e-2.

gradcheck: torch.autograd.gradcheck in float64 is not possible here. The all-to-all kernels
move bf16 / fp16 / fp32 rows only and accumulate in fp32, and topk_weights are fp32 by
contract, so nothing in this layer runs in float64. The checks below are float32 finite
differences instead: eps 1e-2, atol = rtol = 1e-2 (fp32 rounding noise at that step is about
1e-5 relative; the functions are smooth on that scale). gradcheck calls the function many times
and each call is one collective dispatch + combine round (and each of its backward calls one
more), so every rank uses the same shapes and hence makes the same calls in the same order.
"""

import contextlib
import functools
import warnings

import pytest
import torch
import torch._functorch.config as functorch_config
import torch.distributed as dist

import moe_a2a
from moe_a2a import dense_moe as dm
from moe_a2a import layers as L
from moe_a2a.layers import ExpertParallelMoE

LAYOUTS = ["packed", "padded"]


# --------------------------------------------------------------------------- helpers


def tokens(seed, r, T, H, dtype):
    """Rank r's tokens (or gradient weights): a function of (seed, r) only, drawn on the CPU."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + r)
    return torch.randn(T, H, generator=gen).to(dtype).cuda()


def tokens_per_rank(pattern, world, T_max, seed):
    if pattern == "varied":  # 1..T_max, different per rank
        gen = torch.Generator().manual_seed(seed)
        return torch.randint(1, T_max + 1, (world,), generator=gen).tolist()
    if pattern == "rank0_empty":
        return [0] + [T_max] * (world - 1)
    if pattern == "full":
        return [T_max] * world
    raise ValueError(pattern)


@contextlib.contextmanager
def exact_fp32():
    """fp32 matmuls in full fp32 (no TF32), whatever the process default is."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old[:2]
        torch.set_float32_matmul_precision(old[2])


@functools.lru_cache(maxsize=1)
def full_weights(H, Fd, E, seed, dtype):
    """All experts' weights on this GPU (cached: the DeepSeek-like shape takes seconds to draw)."""
    return ExpertParallelMoE.init_full_weights(H, Fd, E, seed, dtype, "cuda")


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def grad_of(t):
    # An empty input that no graph reaches has grad None: the same as an empty zero gradient.
    if t.grad is None and t.numel() == 0:
        return torch.zeros_like(t)
    assert t.grad is not None, "a gradient is missing"
    return t.grad


def check_close(got, want, dtype, what, grad=False):
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    got, want = got.float(), want.float()
    assert bool(torch.isfinite(got).all()), f"{what}: not finite"
    if want.numel() == 0:
        return
    peak = want.abs().max().item()
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * peak + 1e-12, msg=lambda m: f"{what}: {m}")
        return
    rms = want.pow(2).mean().sqrt().item()
    if grad:
        torch.testing.assert_close(got, want, rtol=5e-2, atol=5e-2 * peak + 1e-12, msg=lambda m: f"{what}: {m}")
    else:
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * rms + 1e-12, msg=lambda m: f"{what}: {m}")
    rel = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    limit = 3e-2 if grad else 1e-2
    assert rel <= limit, f"{what}: relative L2 error {rel:.2e} > {limit:.0e}"


def dense_all_ranks(xs, weights, K):
    """The dense layer on every rank's tokens, routed per rank as each rank routes its own."""
    router, wg, wu, wd = weights
    outs = []
    for x in xs:
        idx, w = dm.route(x, router, K)
        outs.append(dm.swiglu_experts_dense(x, idx, w, wg, wu, wd))
    return outs


def check_dispatch_contract(d, layer):
    """The parts of dispatch's output contract that expert_swiglu relies on."""
    El, H = layer.num_local_experts, layer.hidden_dim
    cap = layer.ep.capacity
    counts = d.expert_num_tokens.long().cpu()
    offs = d.expert_offsets.long().cpu()
    assert d.expert_offsets.dtype == torch.int32 and tuple(offs.shape) == (El + 1,)
    if layer.layout == "packed":
        assert tuple(d.expert_x.shape) == (cap, H), f"packed expert_x {tuple(d.expert_x.shape)}"
        assert offs[0] == 0 and torch.equal(offs[1:] - offs[:-1], counts), "packed offsets are not the counts' scan"
        assert offs[-1] <= cap
    else:
        assert tuple(d.expert_x.shape) == (El, cap, H), f"padded expert_x {tuple(d.expert_x.shape)}"
        assert torch.equal(offs[:-1], torch.arange(El) * cap), "padded offsets[e] != e * capacity"
    assert not d.expert_weights.requires_grad, "expert_weights must not be differentiable"


# --------------------------------------------------------------------------- forward


def deepseek_experts(world):
    return 256 - 256 % world  # 256 when the world divides it, else the nearest multiple below


# name -> (experts(world), K, H, F, T_max, tokens pattern)
FORWARD_SHAPES = {
    "small": (lambda w: 8 * w, 2, 256, 128, 32, "varied"),
    "small_rank0_empty": (lambda w: 8 * w, 2, 256, 128, 32, "rank0_empty"),
    "deepseek_like": (deepseek_experts, 8, 7168, 256, 64, "full"),
}
FORWARD_CASES = [
    (s, lay, dt)
    for s in FORWARD_SHAPES
    for lay in LAYOUTS
    for dt in ([torch.bfloat16] if s == "deepseek_like" else [torch.bfloat16, torch.float32])
]


@pytest.mark.parametrize(
    "shape,layout,dtype", FORWARD_CASES, ids=[f"{s}-{lay}-{str(dt)[6:]}" for s, lay, dt in FORWARD_CASES]
)
def test_forward_matches_dense(shape, layout, dtype, world, rank):
    experts, K, H, Fd, T_max, pattern = FORWARD_SHAPES[shape]
    E, seed = experts(world), 11
    Ts = tokens_per_rank(pattern, world, T_max, seed)
    x = tokens(seed, rank, Ts[rank], H, dtype)
    weights = full_weights(H, Fd, E, seed, dtype)
    big = H * Fd * E > (1 << 26)
    with (
        exact_fp32(),
        ExpertParallelMoE(H, Fd, E, K, T_max, dtype=dtype, layout=layout, init_seed=None if big else seed) as layer,
    ):
        lo, hi = layer.expert_range.start, layer.expert_range.stop
        if big:  # drawing the local experts again on the CPU would only repeat the cached work
            layer.load_full_weights(*weights)
        else:  # the layer's own init must be the slice of init_full_weights
            for name, full in zip(("w_gate", "w_up", "w_down"), weights[1:]):
                assert torch.equal(getattr(layer, name).detach(), full[lo:hi]), f"{name} != full weights' slice"
            assert torch.equal(layer.router_weight.detach(), weights[0])
        with torch.no_grad():
            out = layer(x)
            idx, w = dm.route(x, layer.router_weight, K)
            d = layer.ep.dispatch(x, idx, w)
            check_dispatch_contract(d, layer)
            layer.ep.combine(d.expert_x, d)
        layer.ep.synchronize()
        want = dm.swiglu_experts_dense(x, idx, w, *weights[1:])
        assert out.dtype == dtype
        check_close(out, want, dtype, f"rank {rank} output ({Ts[rank]} tokens)")


# --------------------------------------------------------------------------- backward

BACKWARD_CASES = [
    (torch.float32, "packed", "varied"),
    (torch.float32, "padded", "varied"),
    (torch.float32, "packed", "rank0_empty"),
    (torch.bfloat16, "packed", "varied"),
    (torch.bfloat16, "padded", "varied"),
]


@pytest.mark.parametrize(
    "dtype,layout,pattern", BACKWARD_CASES, ids=[f"{str(d)[6:]}-{lay}-{p}" for d, lay, p in BACKWARD_CASES]
)
def test_backward_matches_dense(dtype, layout, pattern, world, rank):
    E, K, H, Fd, T_max, seed = 4 * world, 2, 128, 64, 24, 21
    Ts = tokens_per_rank(pattern, world, T_max, seed)
    xs = [tokens(seed, r, Ts[r], H, dtype) for r in range(world)]
    gs = [tokens(seed + 1, r, Ts[r], H, torch.float32) for r in range(world)]
    weights = full_weights(H, Fd, E, seed, dtype)
    with exact_fp32(), ExpertParallelMoE(H, Fd, E, K, T_max, dtype=dtype, layout=layout, init_seed=seed) as layer:
        lo, hi = layer.expert_range.start, layer.expert_range.stop
        x = leaf(xs[rank])
        out = layer(x)
        (out.float() * gs[rank]).sum().backward()  # collective: every rank, even with no tokens
        layer.all_reduce_router_grad()
        layer.ep.synchronize()

        dense_params = [leaf(t) for t in weights]
        xd = [leaf(t) for t in xs]
        dense = dense_all_ranks(xd, dense_params, K)
        sum((o.float() * g).sum() for o, g in zip(dense, gs)).backward()

        check_close(out, dense[rank].detach(), dtype, f"rank {rank} output")
        check_close(grad_of(x), grad_of(xd[rank]), dtype, f"rank {rank} grad x", grad=True)
        for name, p, full in zip(
            ("w_gate", "w_up", "w_down"), (layer.w_gate, layer.w_up, layer.w_down), dense_params[1:]
        ):
            check_close(p.grad, full.grad[lo:hi], dtype, f"rank {rank} grad {name} (experts {lo}..{hi - 1})", grad=True)
        check_close(layer.router_weight.grad, dense_params[0].grad, dtype, "router grad summed over ranks", grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_topk_weights_gradient_functional(layout, dtype, world, rank):
    """ep.dispatch / expert_swiglu / ep.combine by hand with a leaf topk_weights: combine's
    gradient must land on the tensor given to dispatch, and x's on x."""
    E, K, H, Fd, T_max, seed = 4 * world, 3, 128, 64, 16, 31
    Ts = tokens_per_rank("varied", world, T_max, seed)
    x0 = tokens(seed, rank, Ts[rank], H, dtype)
    g = tokens(seed + 1, rank, Ts[rank], H, torch.float32)
    weights = full_weights(H, Fd, E, seed, dtype)
    with exact_fp32(), ExpertParallelMoE(H, Fd, E, K, T_max, dtype=dtype, layout=layout, init_seed=seed) as layer:
        idx, w0 = dm.route(x0, weights[0], K)
        x, w = leaf(x0), leaf(w0)
        d = layer.ep.dispatch(x, idx, w)
        y = L.expert_swiglu(
            d.expert_x, d.expert_offsets, d.expert_num_tokens, layer.w_gate, layer.w_up, layer.w_down, layout
        )
        out = layer.ep.combine(y, d)
        (out.float() * g).sum().backward()
        layer.ep.synchronize()

        xd, wd = leaf(x0), leaf(w0)
        want = dm.swiglu_experts_dense(xd, idx, wd, *weights[1:])
        (want.float() * g).sum().backward()
        check_close(out, want.detach(), dtype, f"rank {rank} output")
        assert w.grad is not None, "combine gave no gradient to the topk_weights given to dispatch"
        check_close(w.grad, wd.grad, dtype, f"rank {rank} grad topk_weights", grad=True)
        check_close(grad_of(x), grad_of(xd), dtype, f"rank {rank} grad x", grad=True)


# --------------------------------------------------------------------------- gradcheck


def _gradcheck(fn, inputs):
    with warnings.catch_warnings():
        # float32 inputs on purpose (see the module docstring)
        warnings.filterwarnings("ignore", message=".*double precision floating point.*")
        return torch.autograd.gradcheck(fn, inputs, eps=1e-2, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck_dispatch_combine_float32(layout, world, rank):
    """x, topk_weights -> dispatch -> y = 2 x + 1 on the rows of an expert -> combine."""
    E, K, H, T = 2 * world, 2, 8, 3  # same T on every rank: the same number of gradcheck rounds
    gen = torch.Generator().manual_seed(41 * 1_000_003 + rank)
    x = torch.randn(T, H, generator=gen).cuda().requires_grad_()
    idx = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).cuda()
    w = torch.rand(T, K, generator=gen).cuda().requires_grad_()
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, layout=layout) as ep:

        def fn(x, w):
            d = ep.dispatch(x, idx, w)
            flat = d.expert_x.reshape(-1, H)
            valid = L.expert_row_mask(d.expert_offsets, d.expert_num_tokens, flat.shape[0])[:, None]
            y = torch.where(valid, flat * 2 + 1, 0.0).reshape(d.expert_x.shape)
            return ep.combine(y, d)

        assert _gradcheck(fn, (x, w))
        ep.synchronize()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck_layer_float32(layout, world, rank):
    """The whole layer w.r.t. x. Every token picks every expert (K = E), so a finite-difference
    step cannot change which experts are chosen (a jump no derivative describes); the router's
    softmax still depends on x."""
    E, H, Fd, T = 2 * world, 8, 8, 2
    gen = torch.Generator().manual_seed(43 * 1_000_003 + rank)
    x = torch.randn(T, H, generator=gen).cuda().requires_grad_()
    with exact_fp32(), ExpertParallelMoE(H, Fd, E, E, T, dtype=torch.float32, layout=layout, init_seed=43) as layer:
        assert _gradcheck(layer, (x,))
        layer.ep.synchronize()


# --------------------------------------------------------------------------- training


def test_training_matches_dense_float32(world, rank):
    """5 SGD steps of a toy regression (MSE over all ranks' tokens). EP: each rank's loss is
    its share of the global MSE, router grads summed over ranks before the step. Dense: the
    same model on all tokens. The total loss must match every step and go down."""
    E, K, H, Fd, T_max, seed, lr, steps = 4 * world, 2, 64, 32, 16, 51, 0.5, 5
    Ts = tokens_per_rank("varied", world, T_max, seed)
    xs = [tokens(seed, r, Ts[r], H, torch.float32) for r in range(world)]
    targets = [0.1 * tokens(seed + 1, r, Ts[r], H, torch.float32) for r in range(world)]
    n_total = sum(Ts) * H
    dense_params = [leaf(t) for t in full_weights(H, Fd, E, seed, torch.float32)]
    ep_losses, dense_losses = [], []
    with exact_fp32(), ExpertParallelMoE(H, Fd, E, K, T_max, dtype=torch.float32, init_seed=seed) as layer:
        lo, hi = layer.expert_range.start, layer.expert_range.stop
        for _ in range(steps):
            layer.zero_grad(set_to_none=True)
            loss = (layer(xs[rank]) - targets[rank]).pow(2).sum() / n_total
            loss.backward()
            layer.all_reduce_router_grad()
            total = loss.detach().clone()
            dist.all_reduce(total)
            ep_losses.append(total.item())
            with torch.no_grad():
                for p in layer.parameters():
                    p -= lr * p.grad

            for p in dense_params:
                p.grad = None
            outs = dense_all_ranks(xs, dense_params, K)
            dl = sum((o - t).pow(2).sum() for o, t in zip(outs, targets)) / n_total
            dl.backward()
            dense_losses.append(dl.item())
            with torch.no_grad():
                for p in dense_params:
                    p -= lr * p.grad
        layer.ep.synchronize()
        torch.testing.assert_close(
            torch.tensor(ep_losses),
            torch.tensor(dense_losses),
            rtol=1e-4,
            atol=0,
            msg=lambda m: f"total loss per step, EP {ep_losses} vs dense {dense_losses}: {m}",
        )
        assert all(b < a for a, b in zip(ep_losses, ep_losses[1:])), f"loss did not go down every step: {ep_losses}"
        for name, p, full in zip(
            ("w_gate", "w_up", "w_down"), (layer.w_gate, layer.w_up, layer.w_down), dense_params[1:]
        ):
            check_close(p.detach(), full.detach()[lo:hi], torch.float32, f"{name} after {steps} steps")
        check_close(layer.router_weight.detach(), dense_params[0].detach(), torch.float32, "router after training")
        routers = [torch.empty_like(layer.router_weight) for _ in range(world)]
        dist.all_gather(routers, layer.router_weight.detach())
        assert all(torch.equal(r, routers[0]) for r in routers), "the replicated router drifted apart across ranks"


# --------------------------------------------------------------------------- torch.compile


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "float32"])
def test_torch_compile_matches_eager(dtype, world, rank):
    """torch.compile(layer) (graph breaks allowed) forward + backward == eager."""
    E, K, H, Fd, T, seed = 4 * world, 2, 128, 64, 16, 61
    x0 = tokens(seed, rank, T, H, dtype)
    g = tokens(seed + 1, rank, T, H, torch.float32)
    with exact_fp32(), ExpertParallelMoE(H, Fd, E, K, T, dtype=dtype, init_seed=seed) as layer:

        def run(module):
            layer.zero_grad(set_to_none=True)
            x = leaf(x0)
            out = module(x)
            (out.float() * g).sum().backward()
            return out.detach(), x.grad, {n: p.grad.clone() for n, p in layer.named_parameters()}

        eager = run(layer)
        torch._dynamo.reset()
        try:
            # torch.compile's check that no custom op's output aliases an input or another output
            # (at a compiled graph's first call) raises, as it will in torch 2.12, instead of warning
            with functorch_config.patch(error_on_custom_op_aliasing=True):
                compiled = run(torch.compile(layer))
            layer.ep.synchronize()
        except Exception as e:
            raise AssertionError(
                f"torch.compile(ExpertParallelMoE) forward/backward raised {type(e).__name__}: {e}"
            ) from e
        check_close(compiled[0], eager[0], dtype, "torch.compile output vs eager")
        check_close(compiled[1], eager[1], dtype, "torch.compile grad x vs eager", grad=True)
        for n in eager[2]:
            check_close(compiled[2][n], eager[2][n], dtype, f"torch.compile grad {n} vs eager", grad=True)


# --------------------------------------------------------------------------- fp8 dispatch


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e4m3fnuz], ids=["e4m3fn", "e4m3fnuz"])
def test_fp8_dispatch_layer_matches_dense(fp8, layout, world, rank):
    """ExpertParallelMoE(dispatch_dtype=fp8), bf16 weights. Against the dense layer on the
    tokens as fp8 delivers them (quantize_fp8, then dequantized): the bf16 tolerances above,
    since the rest is the bf16 layer. Against the dense layer on the original tokens: relative
    L2 error <= 6e-2 (e4m3 keeps 3 mantissa bits: about 2-3% RMS error per token, which the
    GEMMs average rather than grow). Expert weights still get gradients; x cannot."""
    E, K, H, Fd, T, seed = 8 * world, 4, 512, 256, 32, 31
    dtype = torch.bfloat16
    x = tokens(seed, rank, T, H, dtype)
    weights = full_weights(H, Fd, E, seed, dtype)
    with ExpertParallelMoE(H, Fd, E, K, T, dtype=dtype, layout=layout, init_seed=seed, dispatch_dtype=fp8) as layer:
        with torch.no_grad():
            out = layer(x)
        idx, w = dm.route(x, layer.router_weight, K)
        # The reference quantizes on the CPU: test_fp8.py checks dispatch's bytes against exactly that.
        as_sent = moe_a2a.reference.dequantize_fp8(*moe_a2a.reference.quantize_fp8(x.cpu(), fp8), dtype).cuda()
        check_close(out, dm.swiglu_experts_dense(as_sent, idx, w, *weights[1:]), dtype, f"rank {rank} vs fp8 tokens")
        exact = dm.swiglu_experts_dense(x, idx, w, *weights[1:]).float()
        rel = ((out.float() - exact).norm() / exact.norm()).item()
        assert rel <= 6e-2, f"rank {rank}: fp8 dispatch is {rel:.2e} (relative L2) from the bf16 dense layer"
        layer(x).float().sum().backward()  # the weights' gradients flow through the dequantized rows
        assert layer.w_gate.grad is not None and bool(torch.isfinite(layer.w_gate.grad).all())
        with pytest.raises(RuntimeError, match="forward-only"):
            layer(leaf(x))
        layer.ep.synchronize()
