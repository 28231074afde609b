"""moe_a2a.integrations.transformers without a GPU: registration, the sharding arithmetic, the
checks, and the experts backend's math end to end on the tiny models of tiny_moe_models (NAMES'
own configs, and the other accepted families' default configs with their sizes shrunk: SHRUNK_NAMES),
with LocalExchange for AllToAll at world 1 (the real exchange is tests/python/gpu's job)."""

import copy
import os
import re
import sys

import pytest
import torch
import torch.distributed as dist

transformers = pytest.importorskip("transformers")

import moe_a2a.integrations.transformers as moe_tf  # noqa: E402
from moe_a2a import grouped_gemv as moe_gemv  # noqa: E402
from moe_a2a.local_exchange import LocalExchange  # noqa: E402  (AllToAll at world 1, in plain torch)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tiny_moe_models import (  # noqa: E402
    COMMON,
    EXTRA_INPUTS,
    NAMES,
    SHRINK,
    SHRUNK_NAMES,
    build,
    experts_for_world,
    meta_model,
    shrunk_model,
)


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_backend_is_registered():
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    assert ALL_EXPERTS_FUNCTIONS[moe_tf.BACKEND] is moe_tf.experts_forward


def test_version_outside_the_tested_range_raises(monkeypatch):
    # The module _check_version imports now, not this file's `transformers`: building a model
    # (AutoModelForCausalLM.from_config, in an earlier test of the same session) puts a new
    # transformers module object into sys.modules.
    current = sys.modules["transformers"]
    monkeypatch.setattr(current, "__version__", "4.57.1")
    with pytest.raises(ImportError, match=r"transformers >= 5\.17, < 6\.0.*found 4\.57\.1"):
        moe_tf._check_version()
    monkeypatch.setattr(current, "__version__", "6.0.0")
    with pytest.raises(ImportError, match="found 6.0.0"):
        moe_tf._check_version()


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_local_expert_ranges_tile_the_experts_like_all_to_all(world):
    E = 64
    ranges = [moe_tf.local_expert_range(E, world, r) for r in range(world)]
    assert [e for r in ranges for e in r] == list(range(E))
    for r, local in enumerate(ranges):
        assert all(e // (E // world) == r for e in local)  # AllToAll's owner of global expert e


def test_local_expert_range_rejects_uneven_splits():
    with pytest.raises(ValueError, match="cannot be split evenly"):
        moe_tf.local_expert_range(12, 8, 0)
    with pytest.raises(ValueError, match="outside a world"):
        moe_tf.local_expert_range(16, 2, 2)


@pytest.mark.parametrize("name", NAMES)
def test_tiny_models_split_their_experts_at_any_world(name):
    """The GPU tests' tiny models at worlds 2..8 (experts_for_world): as they are where their experts
    split, else with experts that split, so a world of 3, 5, 6 or 7 runs every test of them."""

    def experts(**overrides):
        return [m.down_proj.shape[0] for _, m in moe_tf.moe_experts(build(name, **overrides))]

    own = experts()
    for world in range(2, 9):
        overrides = experts_for_world(name, world)
        if world in (2, 4, 8):
            assert overrides == {}, (world, overrides)
        got = experts(**overrides) if overrides else own
        assert got and all(e % world == 0 for e in got), (world, overrides, got)


@pytest.mark.parametrize("name", NAMES)
def test_experts_modules_are_found(name):
    model = build(name)
    found = moe_tf.moe_experts(model)
    assert len(found) == (1 if name == "deepseek_v3" else 2)  # DeepSeek-V3: layer 0 is dense
    assert all(name.endswith(".experts") for name, _ in found)
    # Llama 4's blocks are off the experts interface; every other family's experts are on it
    assert len(moe_tf.experts_modules(model)) == (0 if name == "llama4_text" else len(found))
    assert len(moe_tf.scored_input_blocks(model)) == (len(found) if name == "llama4_text" else 0)


def test_sharding_keeps_the_right_slices_and_frees_the_rest():
    model = build("qwen3_moe")
    _, m = moe_tf.experts_modules(model)[0]
    full_up, full_down = m.gate_up_proj.detach().clone(), m.down_proj.detach().clone()
    local = moe_tf.shard_experts_(m, 4, 2)
    assert local == range(8, 12)
    assert torch.equal(m.gate_up_proj, full_up[8:12]) and torch.equal(m.down_proj, full_down[8:12])
    assert m.gate_up_proj.untyped_storage().nbytes() == full_up[8:12].numel() * 4  # not a view of the full one
    assert isinstance(m.gate_up_proj, torch.nn.Parameter) and m.gate_up_proj.requires_grad
    with pytest.raises(RuntimeError, match="already"):
        moe_tf.shard_experts_(m, 4, 2)


def test_expert_parallel_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is up")
    with pytest.raises(RuntimeError, match="torch.distributed"):
        moe_tf.expert_parallel(build("mixtral"))


def test_expert_parallel_checks_its_arguments(one_rank_group):
    with pytest.raises(ValueError, match="max_num_tokens"):
        moe_tf.expert_parallel(build("mixtral"), max_num_tokens=5000)
    with pytest.raises(ValueError, match="no experts module"):
        moe_tf.expert_parallel(torch.nn.Linear(4, 4))
    model = moe_tf.expert_parallel(build("mixtral"))
    assert model.config._experts_implementation == moe_tf.BACKEND
    with pytest.raises(RuntimeError, match="already"):
        moe_tf.expert_parallel(model)
    with pytest.raises(ValueError, match="synced_gpus=True"):
        moe_tf.generate(model, input_ids=torch.zeros(1, 2, dtype=torch.long), synced_gpus=False)


def installed_families(families):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(f for f in families if f in CONFIG_MAPPING_NAMES)


@pytest.mark.parametrize("family", installed_families(moe_tf.REFUSED_FAMILIES))
def test_families_off_the_experts_interface_are_refused_by_name(family, one_rank_group):
    """Each family of REFUSED_FAMILIES (transformers 5.17) is refused with its reason; a later
    transformers that moved the family onto the experts interface (Aria, by 5.24) gets it served."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model, error = meta_model(CONFIG_MAPPING[family]())
    assert model is not None, error
    if moe_tf.moe_experts(model):
        assert moe_tf.expert_parallel(model).config._experts_implementation == moe_tf.BACKEND
        return
    named = model.config.model_type  # llama4 builds its text model, llama4_text
    with pytest.raises(ValueError, match=re.escape(f"{named} models are not served: {moe_tf.REFUSED_FAMILIES[named]}")):
        moe_tf.expert_parallel(model)


def test_unsharded_module_with_the_backend_says_what_to_do():
    _, m = moe_tf.experts_modules(build("mixtral"))[0]
    with pytest.raises(RuntimeError, match="expert_parallel"):
        moe_tf.experts_forward(m, torch.zeros(2, 512), torch.zeros(2, 2, dtype=torch.long), torch.ones(2, 2))


@pytest.mark.parametrize(
    "name,overrides", [(name, {}) for name in NAMES] + [("llama4_text", {"num_experts_per_tok": 2})]
)  # Llama 4 with 2 experts a token: each (token, k) pair a row of its own
def test_backend_matches_the_eager_experts(name, overrides, one_rank_group, monkeypatch):
    """The whole backend (grouped linears with the model's own gate, combine's weighting) at
    world 1 equals transformers' eager experts, logits and gradients."""
    assert_backend_matches_eager(build(name, **overrides), COMMON["vocab_size"], monkeypatch)


@pytest.mark.parametrize("family", installed_families(SHRUNK_NAMES))
def test_every_accepted_family_matches_the_eager_experts(family, one_rank_group, monkeypatch):
    """The accepted families beyond NAMES of the installed transformers, each built from its default
    config with the sizes shrunk (tiny_moe_models.shrunk_config; a multimodal family's language model
    alone): the backend at world 1 equals transformers' eager experts."""
    try:  # written against transformers 5.24, where every one builds; another one may change a config
        # std 0.2: at these sizes std 0.05 left the experts' share of the logits below the tolerance
        # (zeroing their output moved zaya's logits by 4e-6); at 0.2 a 0.1% error in it shows
        reference = shrunk_model(family, std=0.2)
    except Exception as e:  # noqa: BLE001  (transformers' own error, before moe_a2a is involved)
        pytest.skip(f"transformers {transformers.__version__}: {family}'s shrunk config does not build: {e}")
    if not moe_tf.moe_experts(reference) and reference.config.model_type in moe_tf.REFUSED_FAMILIES:
        pytest.skip(f"transformers {transformers.__version__} has {family}'s experts off the experts interface")
    assert_backend_matches_eager(reference, SHRINK["vocab_size"], monkeypatch, EXTRA_INPUTS.get(family))


def experts_outputs(model):
    """A list that the next forward of `model` fills with the output of each experts module's block
    (its parent: Llama 4's blocks run their own forward around the experts), by forward hooks left in
    place (the models are the test's own)."""
    outs = []
    for name, _ in moe_tf.moe_experts(model):
        block = model.get_submodule(name.rsplit(".", 1)[0])
        block.register_forward_hook(lambda _m, _a, out: outs.append((out if torch.is_tensor(out) else out[0]).detach()))
    return outs


def logits(out):
    """A model's logits, or its last hidden state where it has no LM head (a text model alone)."""
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


def assert_backend_matches_eager(reference, vocab_size, monkeypatch, extra_inputs=None):
    """expert_parallel() of a copy of `reference` at world 1 (LocalExchange for AllToAll): every MoE
    layer goes through the backend, and its logits and every experts parameter's gradient equal
    those of `reference` on transformers' eager experts (`extra_inputs`: the forward's inputs beyond
    input_ids, a function of them)."""
    reference.set_experts_implementation("eager")
    model = moe_tf.expert_parallel(copy.deepcopy(reference))
    made = []

    def get(self, E, K, H, dtype, device):
        made.append(E)
        return LocalExchange(E, K, H, 4096, dtype)

    monkeypatch.setattr(moe_tf._Shared, "get", get)
    ids = torch.randint(0, vocab_size, (3, 9), generator=torch.Generator().manual_seed(1))
    # Each MoE block's output too: a norm after the block (OLMo's, for one) hides a small error in
    # it from the logits.
    want_out, got_out = experts_outputs(reference), experts_outputs(model)
    kwargs = extra_inputs(ids) if extra_inputs else {}
    want = logits(reference(ids, **kwargs))
    got = logits(model(ids, **kwargs))
    layers = len(moe_tf.moe_experts(model))
    assert layers > 0 and made == [E for E in made[:1]] * layers  # every MoE layer went through it
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(got_out) == len(want_out)
    for g, w in zip(got_out, want_out):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5 * float(w.abs().max()))
    want.square().mean().backward()
    got.square().mean().backward()
    compared = 0
    for (_, m), (_, ref_m) in zip(moe_tf.moe_experts(model), moe_tf.moe_experts(reference)):
        params = dict(m.named_parameters())
        for pname, ref_p in ref_m.named_parameters():
            if ref_p.grad is None:
                continue
            torch.testing.assert_close(params[pname].grad, ref_p.grad, rtol=1e-4, atol=1e-7, msg=pname)
            compared += int(ref_p.grad.abs().max() > 0)
    assert compared > 0  # some experts weight got a gradient, and it was compared


def test_row_bias_follows_the_expert_segments():
    bias = torch.arange(3.0)[:, None].expand(3, 2)
    offsets = torch.tensor([0, 2, 2, 5], dtype=torch.int32)  # expert 1 empty
    assert moe_tf._row_bias(bias, offsets, 6)[:, 0].tolist() == [0, 0, 2, 2, 2, 2]


@pytest.mark.parametrize("family", installed_families(["gpt_oss", "muse_spark"]))  # biases; a post-expert norm
def test_rows_of_no_expert_reach_no_parameter_gradient(family):
    """dispatch leaves rows of no expert undefined, and the backward of combine their gradients: NaN
    there must reach neither an expert's output row nor a bias's or a norm weight's gradient (each
    sums over rows), which must equal those of the expert rows alone."""
    model = build("gpt_oss") if family == "gpt_oss" else shrunk_model(family)
    (_, experts), *_ = moe_tf.experts_modules(model)
    E, H = experts.down_proj.shape[0], experts.down_proj.shape[2 if experts.is_transposed else 1]
    counts = torch.tensor([2, 0, 3] + [1] * (E - 3), dtype=torch.int32)  # expert 1 empty
    offsets = torch.cat([torch.zeros(1, dtype=torch.int32), counts.cumsum(0).to(torch.int32)])
    rows = int(offsets[-1])
    g = torch.Generator().manual_seed(0)
    x, grad = torch.randn(rows, H, generator=g), torch.randn(rows, H, generator=g)
    nan = torch.full((3, H), float("nan"))  # 3 rows past the last expert

    def parameter_grads(x, grad):
        experts.zero_grad()
        x = x.clone().requires_grad_()
        y = moe_tf._interface_experts(experts, x, offsets, counts)
        y.backward(grad)
        return y.detach(), {n: p.grad.clone() for n, p in experts.named_parameters()}

    y_want, want = parameter_grads(x, grad)
    y_got, got = parameter_grads(torch.cat([x, nan]), torch.cat([grad, nan]))
    torch.testing.assert_close(y_got[:rows], y_want)
    assert bool((y_got[rows:] == 0).all())
    assert any("bias" in n or "norm" in n for n in got)
    for n in want:
        torch.testing.assert_close(got[n], want[n], msg=lambda m: f"{family} {n}: {m}")


@pytest.mark.parametrize("name", ["qwen3_moe", "gpt_oss"])  # gpt-oss: biases
def test_experts_with_no_row_still_give_every_gradient(name):
    """A rank whose experts got no row (every count 0, all rows past the last expert): the
    output is zeros, and x and every expert parameter still get a gradient, of zeros, not None.
    Without the edge to x, autograd skipped that rank's backward of dispatch, a collective round
    (4 x H100, session 15: the training test hung); without one to the weights, they had no
    gradient where the full model's unused experts get zeros."""
    model = build(name)
    (_, experts), *_ = moe_tf.experts_modules(model)
    E, H = experts.down_proj.shape[0], experts.down_proj.shape[2 if experts.is_transposed else 1]
    counts, offsets = torch.zeros(E, dtype=torch.int32), torch.zeros(E + 1, dtype=torch.int32)
    x = torch.randn(4, H).requires_grad_()
    y = moe_tf._interface_experts(experts, x, offsets, counts)
    y.sum().backward()
    assert bool((y == 0).all())
    assert x.grad is not None and bool((x.grad == 0).all())
    for n, p in experts.named_parameters():
        assert p.grad is not None, f"{name} {n}: no gradient"
        assert bool((p.grad == 0).all()), f"{name} {n}: a nonzero gradient from no row"


@pytest.mark.parametrize("world,name", [(2, "mixtral"), (8, "deepseek_v3"), (2, "llama4_text")])
def test_a_rank_with_no_sequences_follows_the_generate_loop(world, name):
    """transformers' synced_gpus loop (prefill, then per step an all-reduce and a forward) and
    moe_tf.generate(input_ids=None) on a rank with nothing to generate make the same sequence of
    collective calls, also at world 8 with ranks of 1 and 2 prompts of different lengths: CPU
    processes over gloo, with a stand-in exchange whose calls are collectives too
    (hf_sync_worker.py)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_sync_worker.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env["OMP_NUM_THREADS"] = "1"  # world processes on a CPU runner of a few cores
    procs = [
        subprocess.Popen([sys.executable, worker, str(r), str(port), str(world), name], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
        for r in range(world)
    ]  # fmt: skip
    outs = [p.communicate(timeout=240) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r} failed:\n{out}\n{err[-4000:]}"
    found = {out.split("moe collectives ")[-1].strip() for out, _ in outs}
    assert len(found) == 1, f"ranks made different numbers of MoE collectives: {found}"
    collectives, layers = (int(v) for v in found.pop().split(" layers "))
    # (dispatch, combine) x (the prefill + 3 steps) in every MoE layer
    assert layers > 0 and collectives == 2 * layers * 4, (collectives, layers)


def test_tokens_per_forward_sizes_the_all_to_all_it_uses(one_rank_group, monkeypatch):
    """Inside tokens_per_forward(model, n) the MoE layers use an AllToAll made for n rounded up to
    a power of two (one, shared by the layers; capped at max_num_tokens), outside it the
    max_num_tokens one; more tokens than that raise naming the block; bad n raise; the block
    restores what was in force."""
    import moe_a2a.all_to_all

    made = []

    def sized(group, E, K, H, T, dtype, **kwargs):
        made.append(T)
        return LocalExchange(E, K, H, T, dtype)

    monkeypatch.setattr(moe_a2a.all_to_all, "AllToAll", sized)
    model = moe_tf.expert_parallel(build("mixtral"), max_num_tokens=32)
    shared = moe_tf._models[model]
    ids = torch.randint(1, COMMON["vocab_size"], (2, 3), generator=torch.Generator().manual_seed(2))
    with moe_tf.tokens_per_forward(model, 6):  # an AllToAll for 8 tokens
        model(ids)
        model(ids[:1])
        with pytest.raises(ValueError, match="tokens_per_forward"):
            model(torch.cat([ids, ids], 1))  # 12 tokens > 8
    with moe_tf.tokens_per_forward(model, 5):  # the same AllToAll
        model(ids)
    with moe_tf.tokens_per_forward(model, 20):  # 32 = max_num_tokens: the default AllToAll
        model(ids)
    assert shared.tokens == 32
    model(ids)
    assert made == [8, 32]
    for bad in (0, 33):
        with pytest.raises(ValueError, match="tokens_per_forward"):
            with moe_tf.tokens_per_forward(model, bad):
                pass
    assert moe_tf.tokens_per_forward_of_all(model, 5) == 5  # world 1
    with pytest.raises(RuntimeError, match="not expert-parallel"):
        with moe_tf.tokens_per_forward(build("mixtral"), 4):
            pass


def test_an_expert_parallel_models_steps_use_an_all_to_all_of_the_decode_batch(one_rank_group, monkeypatch):
    """The steps of an expert-parallel model run in a tokens_per_forward() block of the largest
    batch of any rank (world 1 here: its own), so their AllToAll is sized for the batch."""
    import moe_a2a.all_to_all
    from moe_a2a.integrations.decode_graph import DecodeGraph

    made = []

    def sized(group, E, K, H, T, dtype, **kwargs):
        made.append(T)
        return LocalExchange(E, K, H, T, dtype)

    monkeypatch.setattr(moe_a2a.all_to_all, "AllToAll", sized)
    model = moe_tf.expert_parallel(build("mixtral").eval(), max_num_tokens=64)
    ids = torch.randint(1, COMMON["vocab_size"], (3, 4), generator=torch.Generator().manual_seed(4))
    cache = transformers.StaticCache(config=model.config, max_cache_len=ids.shape[1] + 2)
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    step = DecodeGraph(model, cache, warmup_steps=10)
    step(out.logits[:, -1:].argmax(-1))
    assert made == [64, 4]  # the batch, 3, rounded up to a power of two


@pytest.mark.parametrize("name", ["deepseek_v3", "qwen3_moe", "mixtral", "gpt_oss"])
def test_the_swiglu_is_fused_only_where_the_model_gates_by_default_with_silu(name):
    """grouped_gemv's fused SwiGLU stands for transformers' default gate (act_fn(gate) * up over
    the concatenated halves) with SiLU only: gpt-oss gates its own way (clamped, interleaved)."""
    experts = [m for _, m in moe_tf.moe_experts(build(name))]
    assert experts and all(moe_tf._default_swiglu(m) == (name != "gpt_oss") for m in experts)
    plain = experts[0]
    plain.act_fn = torch.nn.GELU()  # another activation: not fused
    assert not moe_tf._default_swiglu(plain)


@pytest.mark.parametrize("max_num_tokens", [2, 64])
def test_the_experts_are_asked_with_the_exchanges_rows_an_expert(max_num_tokens, one_rank_group, monkeypatch):
    """Each of a MoE layer's two projections asks applies() with max_num_tokens x top-k / local
    experts, the rows an expert gets on average where every rank feeds the exchange its most:
    under the limit for a decode step's exchange (2 tokens), above it for a prefill's (64). The up
    projection (Qwen3-MoE's default SiLU gate) asks first with the SwiGLU fused, then, refused,
    without it."""
    reference = build("qwen3_moe")  # top-k and experts below
    model = moe_tf.expert_parallel(reference)
    asked = []

    def applies(x, w, rows_per_expert, swiglu=False):
        asked.append((rows_per_expert, swiglu))
        return False  # the CPU path then

    monkeypatch.setattr(moe_gemv, "applies", applies)
    monkeypatch.setattr(
        moe_tf._Shared, "get", lambda self, E, K, H, dtype, device: LocalExchange(E, K, H, max_num_tokens, dtype)
    )
    with torch.no_grad():
        model(torch.ones(1, 2, dtype=torch.long))
    k, experts = reference.config.num_experts_per_tok, reference.config.num_experts
    want = max_num_tokens * k / experts
    layers = len(moe_tf.moe_experts(model))
    assert layers > 0 and asked == [(want, True), (want, False), (want, False)] * layers
    assert (want <= moe_gemv.ROWS_PER_EXPERT_LIMIT) == (max_num_tokens == 2)
