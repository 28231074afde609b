"""Hugging Face transformers models expert-parallel on moe_a2a (issue 15), under torchrun: every
rank runs its own sequences (different lengths) through the expert-parallel model and must get
what the full, unsharded model gives for them; generate() keeps ranks that stop at different
steps in line."""

import copy
import os
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

import moe_a2a.integrations.transformers as moe_tf  # noqa: E402
from moe_a2a.integrations.shared_overlap import overlap_states  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tiny_moe_models import COMMON, NAMES, build, experts_for_world  # noqa: E402


def models(name, dtype, **overrides):
    """(the full model with transformers' eager experts, an expert-parallel copy), on this GPU; at a
    world its experts do not split over (3, 5, 6, 7), with a few experts more (experts_for_world)."""
    overrides = {**experts_for_world(name, torch.distributed.get_world_size()), **overrides}
    reference = build(name, **overrides).to(device="cuda", dtype=dtype)  # same seed: the same weights on every rank
    reference.set_experts_implementation("eager")
    return reference, moe_tf.expert_parallel(copy.deepcopy(reference), max_num_tokens=64)


def rank_inputs(rank, batch=2):
    """Token ids from 1 up: generate() calls pass pad_token_id=0, and transformers takes a 0 in a
    prompt for padding and infers an attention mask (with it, DeepSeek-V3's attention fails in
    transformers itself: rank 2's prompt began with 0, which only world >= 3 reaches)."""
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randint(1, COMMON["vocab_size"], (batch, 5 + 3 * rank), generator=g).cuda()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", NAMES)
def test_expert_parallel_model_matches_the_full_model(name, dtype, rank, world):
    reference, model = models(name, dtype)
    try:
        kept = {n: m.down_proj.shape[0] for n, m in moe_tf.moe_experts(model)}
        full = {n: m.down_proj.shape[0] for n, m in moe_tf.moe_experts(reference)}
        assert full and kept.keys() == full.keys()
        assert all(kept[n] * world == full[n] for n in full), (kept, full)
        ids = rank_inputs(rank)
        with torch.no_grad():
            want = reference(ids).logits.float()
            got = model(ids).logits.float()
        # an eager forward launches no shared expert early, and tells which blocks a capture may
        # (those that add the shared expert of their input to the experts' output)
        states = [(s.taken, s.confirmed, s.enabled) for s in overlap_states(model)]
        confirmed = name in ("deepseek_v3", "llama4_text")
        assert states == [(0, confirmed, confirmed)] * (len(kept) if confirmed else len(states)), states
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        else:  # bf16: the eager experts round each expert's output and sum in bf16, combine in fp32
            err = ((got - want).norm() / want.norm()).item()
            assert err < 2e-2, f"rank {rank}: relative error {err:.3g}"
    finally:
        moe_tf.close(model)


def test_generate_keeps_ranks_that_stop_at_different_steps_in_line(rank, world):
    """Rank r asks for 32 - 8r new tokens (no EOS), so rank 0 is done last and the others must
    keep taking part in its MoE calls; every rank's tokens, and its logits at prefill and at
    every decode step, equal the full model's."""
    reference, model = models("mixtral", torch.float32)
    try:
        ids = rank_inputs(rank, batch=1)
        kwargs = dict(
            max_new_tokens=max(1, 32 - 8 * rank),
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            output_logits=True,
            return_dict_in_generate=True,
        )
        want = reference.generate(ids, **kwargs)
        got = moe_tf.generate(model, ids, **kwargs)
        assert torch.equal(got.sequences, want.sequences), (
            f"rank {rank}: {got.sequences.tolist()} != {want.sequences.tolist()}"
        )
        assert len(got.logits) == len(want.logits) == kwargs["max_new_tokens"]
        for step, (g, w) in enumerate(zip(got.logits, want.logits)):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, msg=lambda m: f"rank {rank} step {step}: {m}")
    finally:
        moe_tf.close(model)


def test_generate_with_a_rank_that_has_no_sequences(rank, world):
    """The last rank has nothing to generate: it takes part with 0 tokens until the others are
    done; the others' tokens are the full model's, with different prompt counts per rank."""
    reference, model = models("deepseek_v3", torch.float32)
    try:
        kwargs = dict(max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
        if rank == world - 1:
            assert moe_tf.generate(model, input_ids=None, **kwargs) is None
        else:
            # 1 or 2 prompts: prompts grow with the rank, and at world 8 a batch of 1 + rank prompts
            # would pass max_num_tokens (64)
            ids = rank_inputs(rank, batch=1 + rank % 2)
            got = moe_tf.generate(model, ids, **kwargs)
            assert torch.equal(got, reference.generate(ids, **kwargs)), f"rank {rank}: tokens differ"
    finally:
        moe_tf.close(model)


@pytest.mark.parametrize("name", ["qwen3_moe", "gpt_oss"])  # gpt-oss: expert biases
def test_training_step_gradients_match_the_full_model(name, rank, world):
    """One backward pass: each rank's loss on its own sequences. A local expert's gradient
    collects every rank's tokens routed to it, so it equals the full model's gradient of the
    sum of all ranks' losses, sliced; every replicated parameter's gradient (router, attention),
    summed over ranks (as data parallelism does), equals the full model's too. The memory the
    backward allocates is first filled with NaN: rows of no expert hold whatever was there, and an
    expert bias sums its gradient over rows, so it must not read them."""
    reference, model = models(name, torch.float32)
    try:
        model.train()
        reference.train()
        loss = model(rank_inputs(rank)).logits.square().mean()
        poison = torch.full((64 << 20,), float("nan"), device="cuda")  # 256 MB back in the cache
        del poison
        loss.backward()
        full = sum(reference(rank_inputs(r)).logits.square().mean() for r in range(world))
        full.backward()
        ref_params = dict(reference.named_parameters())
        experts = dict(moe_tf.experts_modules(model))
        # Every collective first, in the same order on every rank; the checks after them (a rank
        # failing a check while the other waits in an all_reduce would leave that one waiting).
        got, want = {}, {}
        for n, p in model.named_parameters():
            g = p.grad.clone() if p.grad is not None else None
            want[n] = ref_params[n].grad
            if n.rsplit(".", 1)[0] in experts:  # this rank's experts: a slice of the full model's
                local = moe_tf.local_expert_range(want[n].shape[0], world, rank)
                want[n] = want[n][local.start : local.stop]
            else:
                torch.distributed.all_reduce(g if g is not None else torch.zeros_like(p))
            got[n] = g
        for n, g in got.items():
            assert g is not None, f"{n}: no gradient"
            torch.testing.assert_close(g, want[n], rtol=1e-3, atol=1e-6, msg=lambda s: f"{n}: {s}")
        checked = sum(n.rsplit(".", 1)[0] in experts for n in got)
        assert checked >= 2 * len(experts), f"{checked} experts parameters checked"
    finally:
        moe_tf.close(model)


def test_too_many_tokens_for_the_model_says_what_to_do(rank, world):
    _, model = models("mixtral", torch.float32)
    try:
        ids = torch.zeros(2, 40, dtype=torch.long, device="cuda")  # 80 tokens > max_num_tokens=64
        with pytest.raises(ValueError, match="max_num_tokens"):
            model(ids)
    finally:
        moe_tf.close(model)


@pytest.mark.parametrize(
    "dtype,gemv,tol",
    [(torch.bfloat16, "1", 2e-2), (torch.bfloat16, "0", 2e-2), (torch.float32, "1", 1e-4)],
    ids=["bf16-grouped_gemv", "bf16-grouped_mm", "fp32-grouped_gemv"],
)
def test_decode_graph_gives_the_full_models_logits(rank, world, dtype, gemv, tol, monkeypatch):
    """The decode step captured in a CUDA graph (DecodeGraph on a StaticCache; the experts on
    moe_a2a's grouped_gemv, or with MOE_A2A_GROUPED_GEMV=0 on torch._grouped_mm, which fp32 has
    not), dispatch and combine inside it, with a different batch per rank and the same tokens
    fed to both: at every step, eager and replayed, the logits are the full model's; the steps
    used an AllToAll sized for the largest batch; a step past the cache raises on every rank
    before any collective call."""
    monkeypatch.setenv("MOE_A2A_GROUPED_GEMV", gemv)
    from transformers import StaticCache

    from moe_a2a.integrations.decode_graph import DecodeGraph

    # as in the real DeepSeek-V3 (MLA), as many key/value heads as heads: the tiny config's 4 of 8
    # fail in transformers' attention on a StaticCache, moe_a2a or not
    heads = COMMON["num_attention_heads"]
    reference, model = models("deepseek_v3", dtype, num_key_value_heads=heads)
    try:
        ids = rank_inputs(rank, batch=1 + rank % 2)
        new = 7  # 2 eager steps, the capture, 4 more replays
        g = torch.Generator().manual_seed(200 + rank)
        fed = torch.randint(1, COMMON["vocab_size"], (ids.shape[0], new), generator=g).cuda()
        with torch.no_grad():
            want = reference(torch.cat([ids, fed], 1)).logits[:, ids.shape[1] :].float()
            cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + new + 1)
            model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        step = DecodeGraph(model, cache)
        for i in range(new):
            got = step(fed[:, i : i + 1])[:, -1].float()
            err = ((got - want[:, i]).norm() / want[:, i].norm()).item()
            assert err < tol, f"rank {rank} step {i} ({'replayed' if step.captured else 'eager'}): error {err:.3g}"
        assert step.captured and step.eager_steps == 2
        # the shared expert on its side stream in the capture (once: a replay runs no Python), a
        # branch of the graph
        assert [state.taken for state in overlap_states(model)] == [1] * len(moe_tf.moe_experts(model))
        sizes = sorted(ep.max_num_tokens for ep in moe_tf._models[model].all_to_all.values())
        assert sizes == [2, 64], sizes  # the decode steps' (the largest batch, 2) and the prefill's
        step(fed[:, :1])  # the cache's last position
        with pytest.raises(ValueError, match="StaticCache is full"):
            step(fed[:, :1])
    finally:
        moe_tf.close(model)
