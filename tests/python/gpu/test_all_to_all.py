"""Dispatch and combine against the pure-torch reference, on every GPU of the node.

Every rank builds every rank's inputs from one seed (moe_a2a.reference), so each rank checks
its own dispatch output and combine output locally: dispatch exactly (as sets per expert),
combine with the challenge's tolerance and bitwise across repeated runs (all_to_all_checks.py).
What raises (bad input, bad ids, overflow, a missing peer) is in test_errors.py.
"""

import hooks
import pytest
import torch
import torch._functorch.config as functorch_config
import torch.distributed as dist
from all_to_all_checks import (
    check_dispatch,
    check_layout,
    edge_inputs,
    experts_for,
    fake_grouped_gemm,
    fits,
    run_round,
    to_device,
)

import moe_a2a
from moe_a2a import reference as ref
from moe_a2a._ext import ext
from moe_a2a._rounds import _DispatchOutputs

CHALLENGE_CORRECTNESS = [
    (8, 2, 6144, 4),
    (64, 6, 2048, 4),
    (64, 6, 2048, 8),
    (128, 4, 2880, 16),
    (128, 4, 2880, 32),
    (128, 8, 4096, 64),
    (128, 8, 4096, 128),
    (256, 8, 7168, 64),
    (256, 8, 7168, 128),
]
CHALLENGE_BENCHMARK = [
    (8, 2, 6144, 16),
    (64, 6, 2048, 32),
    (128, 4, 2880, 128),
    (128, 8, 4096, 256),
    (256, 8, 7168, 256),
]


@pytest.mark.parametrize("layout", ["padded", "packed"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", CHALLENGE_CORRECTNESS + CHALLENGE_BENCHMARK, ids=lambda s: "E{}K{}H{}T{}".format(*s))
def test_challenge_shapes(shape, dtype, layout, world, rank):
    E, K, H, T = shape
    if not fits(E, world):
        pytest.skip(f"{E} experts cannot be split over {world} ranks")
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, layout=layout) as ep:
        for seed in (1, 2):  # two rounds: the second must not see the first's flags
            inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=seed)
            first = run_round(ep, inputs, rank, world, E)
        again = run_round(ep, inputs, rank, world, E, check=False)
        assert torch.equal(first.view(torch.int16), again.view(torch.int16)), "combine is not bitwise reproducible"


@pytest.mark.parametrize("layout", ["padded", "packed"])
@pytest.mark.parametrize(
    "case", ["rank0_no_tokens", "all_ranks_no_tokens", "max_tokens", "int64_ids", "one_expert", "one_rank"]
)
def test_edge_cases(case, layout, world, rank):
    E, K, H, T = experts_for(64, world), 6, 2880, 32
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, layout=layout) as ep:
        run_round(ep, edge_inputs(case, world, E, K, H, T, torch.bfloat16), rank, world, E)


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_float32_tokens(layout, world, rank):
    """fp32 transport: combine accumulates in fp32 and casts to fp32, so it matches the
    reference far tighter than the challenge tolerance."""
    E, K, H, T = 8 * world, 4, 2888, 32
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, layout=layout) as ep:
        inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=61)
        x, idx, w = to_device(inputs)[rank]
        d = ep.dispatch(x, idx, w)
        out = ep.combine(fake_grouped_gemm(d, rank), d)
        ep.synchronize()
        check_layout(d, layout)
        check_dispatch(d, inputs, rank, world, E)
        want = ref.moe_reference(inputs, rank, E, world)
        torch.testing.assert_close(out.cpu(), want, rtol=1e-6, atol=1e-6)


def test_topk_one(world, rank):
    E, K, H, T = experts_for(16, world), 1, 1024, 64
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float16) as ep:
        run_round(ep, ref.generate_all_inputs(world, E, K, H, T, torch.float16, seed=7), rank, world, E)


def test_thousand_consecutive_rounds(world, rank):
    """Fresh data every call on one AllToAll: a stale flag from call i-1 would show up as a
    wrong answer (or a count from the previous call) in call i."""
    E, K, H, T = experts_for(32, world), 4, 256, 16
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16) as ep:
        for i in range(1000):
            inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=1000 + i)
            x, idx, w = to_device(inputs)[rank]
            d = ep.dispatch(x, idx, w)
            out = ep.combine(fake_grouped_gemm(d, rank), d)
            want = ref.moe_reference(to_device(inputs), rank, E, world)
            torch.testing.assert_close(out.float(), want.float(), rtol=1e-2, atol=5e-3, msg=lambda m: f"call {i}: {m}")
        ep.synchronize()


def byte_range(t):
    return (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("ops", ["fused", "split"])
def test_outputs_are_the_callers_and_do_not_overlap(ops, fp8, world, rank):
    """What lifetime.md promises about a dispatch's outputs: every one (and the route) is an
    allocation of its own (a storage of its own: torch.compile's rule for a custom op's outputs),
    none overlapping another, each contiguous and 256-byte aligned; and an output kept alone stays
    valid and unchanged while the rest is freed and later rounds run."""
    E, K, H, T = experts_for(32, world), 4, 256, 16
    dtype = torch.bfloat16
    kw = {"dispatch_dtype": torch.float8_e4m3fn} if fp8 else {}
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, layout="packed", **kw) as ep:
        x, idx, w = to_device(ref.generate_all_inputs(world, E, K, H, T, dtype, seed=21))[rank]
        if ops == "fused":
            d = ep.dispatch(x, idx, w)
        else:
            d = ep.dispatch_recv(ep.dispatch_send(x, idx, w))
        small = {n: getattr(d, n) for n in ("expert_num_tokens", "expert_offsets", "expert_meta", "expert_weights")}
        small.update(zip(("route." + n for n in d._route._fields), d._route))
        if fp8:
            small["expert_x_scale"] = d.expert_x_scale
        storages = {n: t.untyped_storage()._cdata for n, t in [("expert_x", d.expert_x), *small.items()]}
        assert len(set(storages.values())) == len(storages), f"outputs share a storage: {storages}"
        assert all(t.untyped_storage().nbytes() == t.numel() * t.element_size() for t in small.values())
        ranges = sorted((byte_range(t), n) for n, t in [("expert_x", d.expert_x), *small.items()] if t.numel() > 0)
        for (a, an), (b, bn) in zip(ranges, ranges[1:]):
            assert a[1] <= b[0], f"{an} {a} overlaps {bn} {b}"
        for n, t in small.items():
            assert t.is_contiguous() and t.data_ptr() % 256 == 0, (
                f"{n}: contiguous {t.is_contiguous()}, at {t.data_ptr()}"
            )
        out = ep.combine(d.expert_x.to(dtype) if fp8 else d.expert_x, d)
        meta = d.expert_meta
        kept = meta.clone()
        del d, small, out
        for seed in (22, 23, 24):  # later rounds, other routings, reusing freed memory
            x, idx, w = to_device(ref.generate_all_inputs(world, E, K, H, T, dtype, seed=seed))[rank]
            d = ep.dispatch(x, idx, w)
            ep.combine(d.expert_x.to(dtype) if fp8 else d.expert_x, d)
        ep.synchronize()
        assert torch.equal(meta, kept), "expert_meta, kept alone, changed"


def test_cuda_graph_replay_matches_eager(world, rank):
    E, K, H, T = experts_for(64, world), 6, 2048, 32
    dtype = torch.bfloat16
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype) as ep:
        first = to_device(ref.generate_all_inputs(world, E, K, H, T, dtype, seed=11, num_tokens=T))
        sx, sidx, sw = (t.clone() for t in first[rank])

        def step():
            d = ep.dispatch(sx, sidx, sw)
            return ep.combine(fake_grouped_gemm(d, rank), d)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()  # warm-up outside capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = step()
        for seed in (12, 13, 14):
            inputs = to_device(ref.generate_all_inputs(world, E, K, H, T, dtype, seed=seed, num_tokens=T))
            x, idx, w = inputs[rank]
            sx.copy_(x), sidx.copy_(idx), sw.copy_(w)
            graph.replay()
            ep.synchronize()
            eager = step()
            assert torch.equal(static_out.view(torch.int16), eager.view(torch.int16)), f"seed {seed}: graph != eager"
            torch.testing.assert_close(
                static_out.float(), ref.moe_reference(inputs, rank, E, world).float(), rtol=1e-2, atol=5e-3
            )


def custom_op_aliasing_raises():
    """torch.compile's check that no output of a custom op aliases an input or another output
    (run at a compiled graph's first call) raises, as it will in torch 2.12, instead of warning."""
    return functorch_config.patch(error_on_custom_op_aliasing=True)


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_no_op_output_aliases_an_input_or_another_output(layout, world, rank):
    """torch.compile's check, on every op's real outputs: every op of the library, the backward
    rounds in autograd's order (tests/python/cpu/test_op_outputs.py checks the Meta kernels)."""
    E, K, H, T = experts_for(32, world), 4, 256, 16
    dtype = torch.bfloat16
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, layout=layout) as ep:
        engine, state = ep._engine, ep._state
        x, idx, w = to_device(ref.generate_all_inputs(world, E, K, H, T, dtype, seed=31))[rank]
        checked = []

        def op(name, *args):
            result = getattr(torch.ops.moe_a2a, name)(*args)
            torch._library.utils._c_check_aliasing_constraint(f"moe_a2a::{name}", args, {}, result)
            checked.append(name)
            return result

        *out, dest_mask = op("dispatch", engine, state, x, None, idx, w)
        d = _DispatchOutputs(*out)
        y = fake_grouped_gemm(d, rank)
        route = (d.src_tokens, d.recv_token, d.recv_pos)
        combined = op("combine", engine, state, y, d.expert_weights, *route, dest_mask)
        fresh_state = torch.empty(1, dtype=torch.int64, device=x.device)  # as the backward rounds' (_backward_state)
        op("combine_backward", engine, fresh_state, torch.ones_like(combined), y, d.expert_weights,
           d.expert_offsets, d.expert_num_tokens, *route, dest_mask)  # fmt: skip
        op("dispatch_backward", engine, fresh_state, torch.ones_like(y), None, *route, dest_mask)

        dest_mask = op("dispatch_send", engine, state, x, None, idx, w)
        d = _DispatchOutputs(*op("dispatch_recv", engine, state))
        route = (d.src_tokens, d.recv_token, d.recv_pos)
        op("combine_send", engine, state, fake_grouped_gemm(d, rank), d.expert_weights, *route)
        op("combine_recv", engine, state, dest_mask)
        # the experts' small-rows linear layer (no all-to-all)
        weights = torch.randn(d.expert_num_tokens.shape[0], 16, H, dtype=dtype, device=x.device)
        op("grouped_gemv", d.expert_x.reshape(-1, H), weights, d.expert_offsets, d.expert_num_tokens, 2)
        # the experts' SwiGLU, weighted, and its backward
        rows = d.expert_x.reshape(-1, H)
        expert_rows = (d.expert_offsets, d.expert_num_tokens)
        h = op("swiglu", rows, rows, d.expert_weights.reshape(-1), *expert_rows)
        op("swiglu_backward", h, rows, rows, d.expert_weights.reshape(-1), *expert_rows, True)
        ep.synchronize()
        schemas = {s.name.split("::")[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("moe_a2a::")}
        assert set(checked) == schemas, f"ops not checked: {schemas - set(checked)}"


@pytest.mark.parametrize("ops", ["fused", "split"])
def test_torch_compile_matches_eager(ops, world, rank):
    E, K, H, T = experts_for(64, world), 6, 2048, 32
    dtype = torch.bfloat16
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype) as ep:
        engine, state = ep._engine, ep._state

        def layer(x, idx, w):
            # The raw ops, their outputs read by name (_DispatchOutputs mirrors the C++ struct).
            if ops == "fused":
                *out, dest_mask = torch.ops.moe_a2a.dispatch(engine, state, x, None, idx, w)
                d = _DispatchOutputs(*out)
                y = (d.expert_x.float() * (1 + rank)).to(d.expert_x.dtype)
                return torch.ops.moe_a2a.combine(
                    engine, state, y, d.expert_weights, d.src_tokens, d.recv_token, d.recv_pos, dest_mask
                )
            dest_mask = torch.ops.moe_a2a.dispatch_send(engine, state, x, None, idx, w)
            d = _DispatchOutputs(*torch.ops.moe_a2a.dispatch_recv(engine, state))
            y = (d.expert_x.float() * (1 + rank)).to(d.expert_x.dtype)
            torch.ops.moe_a2a.combine_send(engine, state, y, d.expert_weights, d.src_tokens, d.recv_token, d.recv_pos)
            return torch.ops.moe_a2a.combine_recv(engine, state, dest_mask)

        compiled = torch.compile(layer, fullgraph=True)
        for seed in (21, 22):
            inputs = to_device(ref.generate_all_inputs(world, E, K, H, T, dtype, seed=seed, num_tokens=T))
            with custom_op_aliasing_raises():  # checked at the compiled graph's first call
                out = compiled(*inputs[rank])
            eager = layer(*inputs[rank])
            ep.synchronize()
            assert torch.equal(out.view(torch.int16), eager.view(torch.int16))
            torch.testing.assert_close(
                out.float(), ref.moe_reference(inputs, rank, E, world).float(), rtol=1e-2, atol=5e-3
            )


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_split_calls_overlap_other_work(layout, world, rank):
    """dispatch_send / dispatch_recv / combine_send / combine_recv with work of the caller in
    between (a matmul on the same stream), on a grid capped with num_sms: same result as the
    reference, and as the fused calls bit for bit."""
    E, K, H, T = 16 * world, 4, 2048, 64
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, layout=layout, num_sms=16) as ep:
        a = torch.randn(512, 512, device="cuda")
        for seed in (71, 72):
            inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=seed)
            x, idx, w = to_device(inputs)[rank]
            pending = ep.dispatch_send(x, idx, w)
            busy = a @ a
            d = ep.dispatch_recv(pending)
            check_dispatch(d, inputs, rank, world, E)
            sent = ep.combine_send(fake_grouped_gemm(d, rank), d)
            busy = busy @ a
            out = ep.combine_recv(sent)
            fused = run_round(ep, inputs, rank, world, E)
            assert torch.equal(out.view(torch.int16), fused.view(torch.int16)), "split calls differ from fused"
            torch.testing.assert_close(
                out.cpu().float(), ref.moe_reference(inputs, rank, E, world).float(), rtol=1e-2, atol=5e-3
            )


@pytest.mark.parametrize("alignment", [16, 128])
def test_expert_alignment(alignment, world, rank):
    """expert_alignment (packed): every expert's segment starts at a multiple of it, the padding
    rows are zeros in expert_x and in the gradient combine's backward returns for it, data and
    gradients are as without it, and the default capacity holds the worst-case padding."""
    E, K, H, T = 8 * world, 4, 512, 40
    with moe_a2a.AllToAll(
        dist.group.WORLD, E, K, H, T, torch.float32, layout="packed", expert_alignment=alignment
    ) as ep:
        assert ep.capacity == world * T * min(K, E // world) + (E // world) * (alignment - 1)
        for seed in (91, 92):
            inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=seed)
            run_round(ep, inputs, rank, world, E)  # offsets follow the aligned counts, padding zero, data right
        x, idx, w = to_device(inputs)[rank]
        xg = x.clone().requires_grad_()
        d = ep.dispatch(xg, idx, w)
        offsets, counts = d.expert_offsets.tolist(), d.expert_num_tokens.tolist()
        assert all(o % alignment == 0 for o in offsets[:-1]), offsets
        y = d.expert_x * (1.0 + rank)
        y.retain_grad()
        ep.combine(y, d).sum().backward()
        ep.synchronize()
        for e in range(E // world):
            pad = y.grad[offsets[e] + counts[e] : offsets[e + 1]]
            assert torch.all(pad == 0), f"expert {e}: the gradient of its padding rows is not zero"
        factor = (1.0 + idx // (E // world)).float()
        torch.testing.assert_close(xg.grad, (w * factor).sum(-1, keepdim=True).expand_as(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="expert_alignment"):
        moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, layout="padded", expert_alignment=16)


def masked_inputs(world, E, K, H, T, dtype, seed):
    """Inputs with about a third of the (token, k) slots unused (-1), token 0 of every rank
    entirely, as int64 ids."""
    inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=seed, index_dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    out = []
    for x, idx, w in inputs:
        masked = torch.rand(idx.shape, generator=g) < 0.35
        masked[0] = True
        out.append(ref.Routing(x, idx.masked_fill(masked, ref.MASKED_SLOT), w))
    return out


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_masked_slots(layout, world, rank):
    """topk_idx = -1 marks an unused slot: no row for it (expert counts, metadata, reference
    dispatch), combine skips it, in the fused and in the split calls; its weight gets a zero
    gradient and x's gradient leaves it out."""
    E, K, H, T = 8 * world, 4, 1024, 48
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, layout=layout) as ep:
        inputs = masked_inputs(world, E, K, H, T, torch.float32, seed=61)
        out = run_round(ep, inputs, rank, world, E)  # dispatch checked against the reference, combine too
        assert torch.all(out[0] == 0), "a token with every slot unused must combine to zero"
        used = sum(int((i >= 0).sum()) for _, i, _ in inputs)
        counts = torch.tensor([0], device="cuda")
        x, idx, w = to_device(inputs)[rank]
        d = ep.dispatch(x, idx, w)
        counts += d.expert_num_tokens.sum()
        ep.combine(fake_grouped_gemm(d, rank), d)
        dist.all_reduce(counts)
        assert int(counts) == used, f"{int(counts)} rows delivered for {used} used slots"
        pending = ep.dispatch_send(x, idx, w)
        d = ep.dispatch_recv(pending)
        check_dispatch(d, inputs, rank, world, E)
        split = ep.combine_recv(ep.combine_send(fake_grouped_gemm(d, rank), d))
        assert torch.equal(split, out), "split calls differ from fused with unused slots"
        # Backward: y(t, k) = x[t] * (1 + owner of k's expert); unused slots count for nothing.
        # A backward with every slot used first, so that each slot's weight-gradient word holds a
        # nonzero value from it when the masked round leaves the unused ones unanswered.
        unmasked = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=61, index_dtype=torch.int64)
        _, full, _ = to_device(unmasked)[rank]
        d = ep.dispatch(x, full, w.clone().requires_grad_())
        ep.combine(d.expert_x * (1.0 + rank), d).sum().backward()
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        d = ep.dispatch(xg, idx, wg)
        ep.combine(d.expert_x * (1.0 + rank), d).sum().backward()
        ep.synchronize()
        factor = (1.0 + idx.clamp(min=0) // (E // world)).float() * (idx >= 0)
        torch.testing.assert_close(wg.grad, x.sum(-1, keepdim=True) * factor, rtol=1e-4, atol=1e-3)
        torch.testing.assert_close(xg.grad, (w * factor).sum(-1, keepdim=True).expand_as(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("num_sms", [1, 3, 8])
def test_few_blocks_many_groups(num_sms, world, rank):
    """Grids far smaller than the token count: each block sends and receives many token groups
    (16 groups of up to 64 tokens with one block: 8, doubled where they would hold more than
    DOUBLE_GROUPS_TOKENS; with 8 blocks 64 groups of 16, not doubled)."""
    E, K, H, T = 8 * world, 3, 512, 1024
    with moe_a2a.AllToAll(
        dist.group.WORLD, E, K, H, T, torch.bfloat16, layout="packed", num_sms=num_sms, groups_per_block=8
    ) as ep:
        num_tokens = [T - 37 * r for r in range(world)]  # uneven group splits per source
        run_round(
            ep,
            ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=81, num_tokens=num_tokens),
            rank,
            world,
            E,
        )


@pytest.mark.parametrize("num_sms", [3, 8, None])
@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_small_batches_split_over_blocks(num_sms, layout, world, rank):
    """Fewer token groups than blocks: combine splits each group's rows by chunk over several
    blocks (EpConfig::combine_parts), a different number of parts per source when the sources'
    token counts differ, so one batch mixes sources whose parts cover different chunks (here 1, 2,
    3 or more parts of a 7-chunk row on NVIDIA, 4-chunk on AMD), and a source with no tokens."""
    E, K, H, T = 16 * world, 8, 7168, 8
    num_tokens = [(1, 3, 0, 2, 5, 1, 7, 4)[r] for r in range(world)]
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, layout=layout, num_sms=num_sms) as ep:
        for seed in (91, 92):
            inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=seed, num_tokens=num_tokens)
            first = run_round(ep, inputs, rank, world, E)
        again = run_round(ep, inputs, rank, world, E, check=False)
        assert torch.equal(first.view(torch.int16), again.view(torch.int16)), "combine is not bitwise reproducible"


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_flagged_partial_sums_across_the_threshold(layout, world, rank):
    """A rank with at most FLAGGED_TOKENS tokens gets combine's partial sums as flagged words
    (csrc/ep/flagged_rows.cuh) and waits for each peer's start signal instead of its partial
    signals, one with more gets rows in comb_x and partial signals. Rounds whose ranks
    fall on both sides of that, in turn, on one AllToAll: forward rounds against the reference,
    a backward round (the backward of dispatch is combine too) against its closed form, and every
    flagged word 0 after each round: combine clears what it read, so no word of an earlier round
    can pass for a later one's."""
    n = ext().FLAGGED_TOKENS
    E, K, H, T = 8 * world, 4, 1024, 2 * n
    schedule = [(n, n + 1), (n + 1, n), (1, T), (T, 1), (0, n), (n + 1, n + 1), (n, n), (1, 1)]
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, layout=layout) as ep:
        for i, counts in enumerate(schedule):
            num_tokens = [counts[r % 2] for r in range(world)]
            inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=300 + i, num_tokens=num_tokens)
            run_round(ep, inputs, rank, world, E)
            assert not hooks.flagged_words(ep).any(), f"round {i} {counts}: flagged words left behind"
            if counts[0] == n:  # and a training round with the same token counts
                x, idx, w = to_device(inputs)[rank]
                x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
                d = ep.dispatch(x, idx, w)
                ep.combine(d.expert_x * (1.0 + rank), d).sum().backward()
                ep.synchronize()
                owner = (idx.long() // (E // world)).float()  # y(t, k) = x[t] * (1 + owner of expert k)
                want_x = (w.detach() * (1.0 + owner)).sum(-1, keepdim=True).expand_as(x)
                torch.testing.assert_close(x.grad, want_x, rtol=1e-5, atol=1e-5)
                assert not hooks.flagged_words(ep).any(), f"backward {counts}: flagged words left behind"


def test_count_words_carry_their_round(world, rank):
    """Dispatch's counts are flagged words (protocol.md, "Flagged counts"): after a round every
    source's words here carry that round's flag, its pairs for each local expert and its token
    count. They are never cleared, so set_rounds_for_test, which can give the next round the last
    one's flag (a flag holds the epoch's low 31 bits), zeroes them: the round after such a jump,
    with other counts, is still right."""
    E, K, H, T = 8 * world, 4, 256, 16
    local = E // world
    counts = [T - 2 * r for r in range(world)]  # 16 .. 2 tokens at world 8
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, layout="packed") as ep:
        inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=41, num_tokens=counts)
        run_round(ep, inputs, rank, world, E)
        words = hooks.count_words(ep).cpu().view(world, local + 1)
        flags, data = (words >> 32) & 0xFFFFFFFF, words & 0xFFFFFFFF
        flag = int(flags[0, 0])
        assert flag >> 31 == 1 and (flags == flag).all(), f"count words of several rounds: {flags}"
        for src in range(world):
            ids = inputs[src][1].long().flatten()
            pairs = torch.bincount(ids[ids >= 0], minlength=E)[rank * local : (rank + 1) * local]
            assert torch.equal(data[src, :local], pairs), f"source {src}'s counts"
            assert int(data[src, local]) == counts[src], f"source {src}'s token count (and no error bit)"
        epoch = flag & 0x7FFFFFFF  # the round's epoch, low 31 bits
        hooks.set_rounds(ep, epoch + 2**31 - 1)  # the next round, epoch + 2^31, has the same flag
        assert not hooks.count_words(ep).any(), "count words left after set_rounds_for_test"
        inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=42, num_tokens=counts[::-1])
        run_round(ep, inputs, rank, world, E)


@pytest.mark.parametrize("layout, alignment", [("padded", 1), ("packed", 1), ("packed", 8)])
def test_own_rows_placed_by_senders(layout, alignment, world, rank):
    """From OWN_PLACED_COPY_TOKENS tokens a fused dispatch of plain rows, every block on both halves,
    places this rank's own rows in expert_x as it sends them, their route and metadata included
    (own_placed in csrc/ep/dispatch.cu; at world 2 only: beyond, both launches stage them). Ranks on
    both sides of the threshold, a masked slot on each: dispatch against the reference; combine,
    the backward of dispatch and the weight gradients bitwise those of a split launch (send_sms),
    which stages its own rows in recv_x."""
    n = ext().OWN_PLACED_COPY_TOKENS
    E, K, H, T = 8 * world, 4, 1024, n + 64
    for i, counts in enumerate([(T, n - 1), (n, T), (T, T)]):
        num_tokens = [counts[r % 2] for r in range(world)]
        inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=700 + i, num_tokens=num_tokens)
        inputs = [ref.Routing(x, idx.clone(), w) for x, idx, w in inputs]
        for r, (_, idx, _) in enumerate(inputs):
            idx[3 + r, 1] = ref.MASKED_SLOT
        kw = dict(layout=layout, expert_alignment=alignment)
        results = rounds_fused_and_split(inputs, rank, world, (E, K, H, T), sm_count() // 2, **kw)
        for name, placed, staged in zip(("combine", "grad x", "grad w"), *results):
            assert torch.equal(placed, staged), f"tokens {num_tokens}: {name} with own rows placed differs from staged"


@pytest.mark.parametrize("num_sms, split", [(8, 4), (None, None)], ids=["8-blocks", "every-sm"])
def test_groups_doubled_where_they_would_be_large(num_sms, split, world, rank):
    """Where one group a block would hold more than DOUBLE_GROUPS_TOKENS tokens, a rank's tokens
    go in twice num_blocks x groups_per_block groups (EpConfig::num_groups; the signals' layout
    grows with them): sources past, at and below that count, a masked slot on each; dispatch
    against the reference; combine, the backward of dispatch and the weight gradients bitwise those
    of a split launch. The backward of combine's sub-ranges run toward the peer with fewer tokens.
    Every SM, (T, n) and (T, T): balanced counts of more than one item a block, whose odd blocks
    take their receive turn first (receives_first); (n + 1, n // 8) is not balanced."""
    n = ext().DOUBLE_GROUPS_TOKENS * (num_sms or sm_count())  # the most tokens of undoubled groups
    E, K, H, T = 8 * world, 4, 512, n + 256
    for i, counts in enumerate([(T, n), (n + 1, n // 8), (T, T)]):
        num_tokens = [counts[r % 2] for r in range(world)]
        inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=720 + i, num_tokens=num_tokens)
        inputs = [ref.Routing(x, idx.clone(), w) for x, idx, w in inputs]
        for r, (_, idx, _) in enumerate(inputs):
            idx[3 + r, 1] = ref.MASKED_SLOT
        results = rounds_fused_and_split(
            inputs, rank, world, (E, K, H, T), split or sm_count() // 2, num_sms=num_sms, layout="packed"
        )
        for name, fused, staged in zip(("combine", "grad x", "grad w"), *results):
            assert torch.equal(fused, staged), f"tokens {num_tokens}: {name} of every block both differs from a split"


def sm_count():
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def rounds_fused_and_split(inputs, rank, world, shape, split, **kw):
    """On an AllToAll with every block on both halves (send_sms=0), then on one with `split` sending
    blocks (AllToAll(**kw) besides): a forward round checked against the reference, and a training
    round. Per AllToAll: (combine's output, x's gradient, the weights' gradient)."""
    E, K, H, T = shape
    x, idx, w = to_device(inputs)[rank]
    results = []
    for send_sms in (0, split):
        with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, send_sms=send_sms, **kw) as ep:
            out = run_round(ep, inputs, rank, world, E)
            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            d = ep.dispatch(xg, idx, wg)
            ep.combine(d.expert_x * (1.0 + rank), d).float().square().sum().backward()
            ep.synchronize()
            results.append((out, xg.grad, wg.grad))
    return results


@pytest.mark.parametrize(
    "num_sms, send_sms, T, layout, alignment",
    [
        (8, 3, 1024, "packed", 16),  # many groups for each sending block, alignment padding cleared by receivers
        (8, (1, 7), 1024, "padded", 1),  # one sender in dispatch, one receiver in combine
        (8, (6, 2), 3, "packed", 1),  # fewer groups than blocks: combine units (2 a group) over 2 senders
        (None, "thirds", 200, "packed", 1),  # every SM
        (None, "thirds", 1, "padded", 1),
        (None, "auto", 1, "packed", 1),  # the default: split at a few tokens
        (8, "auto", 2, "padded", 1),
    ],
    ids=["many-groups", "one-sender-one-receiver", "units", "all-sms", "one-token", "auto-one-token", "auto-8-blocks"],
)
def test_sending_and_receiving_blocks(num_sms, send_sms, T, layout, alignment, world, rank):
    """send_sms: in the fused dispatch and combine some blocks only send and the others only
    receive. Dispatch matches the reference, combine (forward, and the backward of dispatch) and
    the weight gradients are bitwise those of every block doing both (send_sms=0), with sources
    of different token counts."""
    E, K, H = 8 * world, 4, 4096  # 4 chunks a row on NVIDIA: combine units split groups
    if send_sms == "thirds":
        sms = sm_count()
        send_sms = (sms // 3, 2 * sms // 3)
    kw = dict(layout=layout, num_sms=num_sms, expert_alignment=alignment)
    num_tokens = [max(T - 7 * r, 0) if T > 1 else (1, 0)[r % 2] for r in range(world)]
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=97, num_tokens=num_tokens)
    results = rounds_fused_and_split(inputs, rank, world, (E, K, H, T), send_sms, **kw)
    for name, fused, split in zip(("combine", "grad x", "grad w"), *results):
        assert torch.equal(fused, split), f"{name} with send_sms={send_sms} differs from every block doing both"


def test_too_few_blocks_for_max_tokens_raises(world):
    with pytest.raises(ValueError, match="num_sms"):
        moe_a2a.AllToAll(dist.group.WORLD, 8 * world, 2, 256, 4096, torch.bfloat16, num_sms=1)


def test_more_blocks_than_compute_units_raises(world):
    """Every block of a launch must be resident (they wait for one another): a grid larger than the
    device raises at construction, on every rank, instead of timing out in its first round."""
    with pytest.raises(ValueError, match=f"num_sms must be at most {sm_count()} "):
        moe_a2a.AllToAll(dist.group.WORLD, 8 * world, 2, 256, 8, torch.bfloat16, num_sms=sm_count() + 1)


@pytest.mark.parametrize(
    "blocks", [{}, dict(num_sms=8, send_sms=(3, 0))], ids=["default", "drawn-items"]
)  # drawn-items: 8 token groups for 5 receiving blocks, so dispatch draws items (draw_item)
@pytest.mark.parametrize("start", [2**32 - 3, 2**40 - 3, 2**64 - 3], ids=["epoch32", "epoch40", "epoch64"])
def test_rounds_across_epoch_wrap(start, blocks, world, rank):
    """Every kind of round, run across the point where a 32-bit epoch wrapped (the old protocol
    passed every wait there), across the wrap of the 40 epoch bits a signal word (and dispatch's
    ticket word) holds, and across the wrap of the 64-bit round counter: data checked each round."""
    E, K, H, T = 8 * world, 4, 1024, 32
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.float32, layout="packed", **blocks) as ep:
        hooks.set_rounds(ep, start)
        for i in range(8):  # forward rounds, then both backward rounds
            inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=90 + i)
            run_round(ep, inputs, rank, world, E)
        x, idx, w = to_device(inputs)[rank]
        x = x.clone().requires_grad_()
        w = w.clone().requires_grad_()
        d = ep.dispatch(x, idx, w)
        out = ep.combine(d.expert_x * (1.0 + rank), d)
        out.sum().backward()
        ep.synchronize()
        owner = (idx.long() // (E // world)).float()  # y(t, k) = x[t] * (1 + owner of expert k)
        want_w = x.detach().sum(-1, keepdim=True) * (1.0 + owner)  # d sum(out) / d w[t,k] = sum(y(t, k))
        torch.testing.assert_close(w.grad, want_w, rtol=1e-4, atol=1e-3)
        want_x = (w.detach() * (1.0 + owner)).sum(-1, keepdim=True).expand_as(x)
        torch.testing.assert_close(x.grad, want_x, rtol=1e-5, atol=1e-5)
        run_round(ep, inputs, rank, world, E)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_ids_at_an_offset_off_16_bytes(index_dtype, world, rank):
    """topk_idx a view that starts off a 16-byte boundary, with more ids than kWideCountIds (8192)
    on every rank: the counting block reads them 16 bytes at a time from the first boundary on, and
    the few before it and after the last one singly (count_wide); the blocks of the last token
    groups count the pairs before theirs one id a load, over the same misaligned ids. With a
    masked slot on every rank."""
    E, K, H, T = 8 * world, 8, 256, 1100
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, layout="packed") as ep:
        num_tokens = [T - 37 * r for r in range(world)]  # > 1024 tokens each: more than 8192 ids
        inputs = ref.generate_all_inputs(
            world, E, K, H, T, torch.bfloat16, seed=91, index_dtype=index_dtype, num_tokens=num_tokens
        )
        inputs = [ref.Routing(x, idx.clone(), w) for x, idx, w in inputs]
        for r, (_, idx, _) in enumerate(inputs):
            idx[(7 * r) % len(idx), 1] = ref.MASKED_SLOT
        x, idx, w = to_device(inputs)[rank]
        flat = torch.empty(idx.numel() + 1, dtype=index_dtype, device=idx.device)
        off = flat[1:].view(idx.shape)  # one id past the allocation's (aligned) start
        off.copy_(idx)
        assert off.data_ptr() % 16 != 0
        d = ep.dispatch(x, off, w)
        out = ep.combine(fake_grouped_gemm(d, rank), d)
        ep.synchronize()
        check_dispatch(d, inputs, rank, world, E)
        want = ref.moe_reference(inputs, rank, E, world)
        torch.testing.assert_close(out.cpu().float(), want.float(), rtol=1e-2, atol=5e-3)


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_two_rounds_in_flight(layout, world, rank):
    """num_buffers=2: dispatch A, dispatch B, combine A, combine B (and B before A, and through
    the split calls) give what each round gives alone; a third outstanding dispatch raises and
    leaves the AllToAll usable; the heap doubles."""
    E, K, H, T = 8 * world, 4, 1024, 32
    dtype = torch.bfloat16
    a_in = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=81)
    b_in = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=82)
    want_a, want_b = ref.moe_reference(a_in, rank, E, world), ref.moe_reference(b_in, rank, E, world)
    a, b = to_device(a_in)[rank], to_device(b_in)[rank]
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, layout=layout) as one:
        single_bytes = one.heap_bytes
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, layout=layout, num_buffers=2) as ep:
        assert ep.heap_bytes == 2 * single_bytes
        for order in ("AB", "BA"):
            da, db = ep.dispatch(*a), ep.dispatch(*b)
            with pytest.raises(RuntimeError, match="allows 2 outstanding"):
                ep.dispatch(*a)
            ya, yb = fake_grouped_gemm(da, rank), fake_grouped_gemm(db, rank)
            if order == "AB":
                out_a, out_b = ep.combine(ya, da), ep.combine(yb, db)
            else:
                out_b, out_a = ep.combine(yb, db), ep.combine(ya, da)
            with pytest.raises(RuntimeError, match="already combined"):
                ep.combine(ya, da)
            ep.synchronize()
            check_dispatch(da, a_in, rank, world, E)
            check_dispatch(db, b_in, rank, world, E)
            torch.testing.assert_close(out_a.cpu().float(), want_a.float(), rtol=1e-2, atol=5e-3)
            torch.testing.assert_close(out_b.cpu().float(), want_b.float(), rtol=1e-2, atol=5e-3)
        # Split calls, interleaved the way a two-micro-batch pipeline overlaps them.
        pa = ep.dispatch_send(*a)
        pb = ep.dispatch_send(*b)
        da, db = ep.dispatch_recv(pa), ep.dispatch_recv(pb)
        ca = ep.combine_send(fake_grouped_gemm(da, rank), da)
        cb = ep.combine_send(fake_grouped_gemm(db, rank), db)
        out_a, out_b = ep.combine_recv(ca), ep.combine_recv(cb)
        ep.synchronize()
        torch.testing.assert_close(out_a.cpu().float(), want_a.float(), rtol=1e-2, atol=5e-3)
        torch.testing.assert_close(out_b.cpu().float(), want_b.float(), rtol=1e-2, atol=5e-3)
        # A round whose buffer a later dispatch took can no longer be combined.
        old = ep.dispatch(*a)
        ep.combine(fake_grouped_gemm(old, rank), old)
        newer = [ep.dispatch(*b), ep.dispatch(*a)]
        with pytest.raises(RuntimeError, match="reused by a later dispatch"):
            ep.combine(fake_grouped_gemm(old, rank), old)
        for d in newer:
            ep.combine(fake_grouped_gemm(d, rank), d)
        ep.synchronize()
    with pytest.raises(ValueError, match="num_buffers"):
        moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, dtype, num_buffers=0)
