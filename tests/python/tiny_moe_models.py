"""Tiny transformers MoE models with random weights (no download), shared by the CPU and GPU
tests of moe_a2a.integrations.transformers."""

import math

import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    DeepseekV3Config,
    GptOssConfig,
    GraniteMoeConfig,
    Llama4TextConfig,
    MixtralConfig,
    OlmoeConfig,
    Qwen2MoeConfig,
    Qwen3MoeConfig,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

COMMON = dict(
    vocab_size=256,
    hidden_size=512,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=128,
)


# The families of tiny_configs(), in the order the tests run them.
NAMES = ["mixtral", "qwen3_moe", "deepseek_v3", "qwen2_moe", "olmoe", "gpt_oss", "granitemoe", "llama4_text"]


def tiny_configs():
    """Routings and experts of several families: softmax top-2 (Mixtral), top-k with
    renormalisation (Qwen3-MoE), sigmoid grouped top-k with shared experts and a dense first layer
    (DeepSeek-V3), a gated shared expert next to the routed ones (Qwen2-MoE), top-8 of 64 without
    renormalisation (OLMoE), transposed expert weights with biases and a clamped gate (gpt-oss), a
    router outside the experts block with its own top-k (GraniteMoE), and a block that scales each
    token by its router score before the experts, off the experts interface (Llama 4's text model)."""
    return {
        "mixtral": MixtralConfig(**COMMON, intermediate_size=256, num_local_experts=16, num_experts_per_tok=2),
        "qwen3_moe": Qwen3MoeConfig(
            **COMMON,
            moe_intermediate_size=256,
            intermediate_size=512,
            num_experts=16,
            num_experts_per_tok=4,
            norm_topk_prob=True,
            head_dim=64,
        ),
        "deepseek_v3": DeepseekV3Config(
            **COMMON,
            intermediate_size=512,
            moe_intermediate_size=128,
            n_routed_experts=32,
            num_experts_per_tok=4,
            n_group=4,
            topk_group=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            q_lora_rank=64,
            kv_lora_rank=64,
            qk_rope_head_dim=32,
            qk_nope_head_dim=32,
            v_head_dim=64,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
        ),
        "qwen2_moe": Qwen2MoeConfig(
            **COMMON,
            intermediate_size=512,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=256,
            num_experts=16,
            num_experts_per_tok=4,
        ),
        "olmoe": OlmoeConfig(
            **COMMON, intermediate_size=128, num_experts=64, num_experts_per_tok=8, pad_token_id=None, eos_token_id=2
        ),
        "gpt_oss": GptOssConfig(
            **COMMON,
            intermediate_size=128,
            num_local_experts=16,
            num_experts_per_tok=4,
            head_dim=64,
            sliding_window=8,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        "granitemoe": GraniteMoeConfig(**COMMON, intermediate_size=128, num_local_experts=8, num_experts_per_tok=2),
        "llama4_text": Llama4TextConfig(
            **COMMON,
            intermediate_size=128,
            intermediate_size_mlp=256,
            num_local_experts=16,
            num_experts_per_tok=1,
            head_dim=64,
            interleave_moe_layer_step=1,
            attention_chunk_size=64,
        ),
    }


# A family's config field for its number of routed experts: the first of these its config has.
EXPERTS_FIELDS = ("n_routed_experts", "num_local_experts", "num_experts")


def experts_for_world(name, world):
    """Config overrides with which `name`'s tiny model splits its routed experts over `world` ranks:
    none where they split already (world 2, 4 and 8: the model as it is), else its experts rounded
    up to a multiple of the world and of DeepSeek-V3's expert groups (n_group), which split them too."""
    config = tiny_configs()[name]
    field = next(f for f in EXPERTS_FIELDS if hasattr(config, f))
    experts = getattr(config, field)
    if experts % world == 0:
        return {}
    step = math.lcm(world, getattr(config, "n_group", None) or 1)
    return {field: -(-experts // step) * step}


def build(name, seed=0, **overrides):
    """The tiny model `name` with random weights (`overrides`: config fields to change)."""
    config = tiny_configs()[name]
    for field, value in overrides.items():
        setattr(config, field, value)
    return random_model(config, seed)


def random_model(config, seed=0, std=0.05, cls=None):
    """The model of `config` in fp32, every weight drawn (from_config leaves some at zero or one):
    a `cls`, else the causal LM, else the base model where the family has none (a text model with
    no LM head of its own, an encoder)."""
    torch.manual_seed(seed)
    if cls is None:
        cls = AutoModelForCausalLM if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING else AutoModel
        model = cls.from_config(config, dtype=torch.float32)
    else:
        model = cls._from_config(config, dtype=torch.float32)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=std)
    return model.eval()


# Size fields of a family's default config and the tiny values shrunk_config gives those it has.
SHRINK = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=64,
    intermediate_size_mlp=64,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    q_lora_rank=32,
    kv_lora_rank=32,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=16,
    max_position_embeddings=64,
    first_k_dense_replace=0,
    num_experts=8,
    num_local_experts=8,
    n_routed_experts=8,
    moe_num_experts=8,
    num_routed_experts=8,
    num_experts_per_tok=2,
    moe_topk=2,
    top_k=2,
    n_group=1,
    topk_group=1,
    pad_token_id=0,  # inside the shrunk vocabulary
)


def default_layers(*layers):
    """An override of a per-layer list: the default config's entries at `layers` (its own names for
    the layer types, which transformers renamed: 5.17's deepseek_sparse_attention is 5.24's
    indexed_attention)."""
    return lambda default: [default[i] for i in layers]


# MLA attention, whose config points head_dim (the rotary embedding's width) at qk_rope_head_dim
# and derives qk_head_dim = qk_nope_head_dim + qk_rope_head_dim in its __init__ (SHRINK sets fields
# after it: its head_dim 16 disagrees), and expands keys and values to every head (as many key-value
# heads as heads, as in the default configs; SHRINK's 2 of 4 make the attention repeat them again).
MLA = dict(
    head_dim=SHRINK["qk_rope_head_dim"],
    qk_head_dim=SHRINK["qk_nope_head_dim"] + SHRINK["qk_rope_head_dim"],
    num_key_value_heads=SHRINK["num_attention_heads"],
)
# DeepSeek-V3.2's sparse-attention indexer, shrunk (its top-k, 2048, keeps all the test's 9 tokens).
INDEXER = dict(index_head_dim=16, index_n_heads=2)
# Gated DeltaNet (Qwen3-Next's linear attention) heads, shrunk.
GATED_DELTANET = dict(
    linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4
)
# Delta-rule linear attention heads (Kimi Linear's, Bailing's, GLM-5-Next's), shrunk.
LINEAR_HEADS = dict(linear_head_dim=16, linear_num_heads=4)
# M-RoPE (multimodal rotary): its 3 sections (time, height, width) sum to half the rotary width.
M_ROPE = dict(rope_type="default", rope_theta=10000.0)

# Per family, the config fields (of the text_config for a multimodal family) that shrunk_config
# sets in place of SHRINK's: those SHRINK would leave inconsistent, and the per-layer lists that
# would leave the 2 shrunk layers without a MoE layer on the experts interface (a layer after a
# linear-attention one where the family has both, and a dense layer 0 where the default has one).
# A value that is a function gets the default's value. Each passes the test on the CPU in fp32
# (linear attention and Mamba on transformers' torch code).
SHRUNK_OVERRIDES = {
    # MLA
    "axk1": dict(**MLA, mlp_layer_types=["dense", "sparse"]),
    "deepseek_v2": dict(**MLA, num_experts_per_tok=2),  # the default's top-k is None (checkpoints set it)
    "kimi_k25": MLA,  # its language model is DeepSeek-V3's
    "sarvam_mla": MLA,
    # MLA with the indexer; the defaults' first 1 to 3 layers are dense
    "axk2": dict(**MLA, **INDEXER, mlp_layer_types=["dense", "sparse"], layer_types=default_layers(0, 1)),
    "deepseek_v32": dict(**MLA, **INDEXER, mlp_layer_types=["dense", "sparse"], layer_types=default_layers(0, 1)),
    "glm_moe_dsa": dict(**MLA, **INDEXER, mlp_layer_types=["dense", "sparse"], layer_types=default_layers(0, 1)),
    # ... and layer 1 an indexer shared with layer 0's
    "hy_v4": dict(
        **MLA,
        **INDEXER,
        mlp_layer_types=["dense", "sparse"],
        layer_types=default_layers(0, 1),
        indexer_types=["full", "shared"],
    ),
    "hy_v4_vl_text": dict(
        **MLA,
        **INDEXER,
        mlp_layer_types=["dense", "sparse"],
        layer_types=default_layers(0, 1),
        indexer_types=["full", "shared"],
        rope_parameters=dict(**M_ROPE, mrope_section=[2, 1, 1]),  # M-RoPE over qk_rope_head_dim 8
    ),
    "mistral_large4_text": dict(
        **MLA,
        **INDEXER,
        mlp_layer_types=["dense", "sparse"],
        layer_types=default_layers(0, 1),
        indexer_types=default_layers(0, 1),
        no_rope_layers=default_layers(0, 1),
        kv_source_layers=[0, 1],
    ),
    # The default's sliding-window layers have MLA sizes of their own (per_layer_config, which hides
    # the shared size fields from SHRINK): none here. head_dim is qk_nope + qk_rope (SHRINK's 16),
    # the rotary part qk_rope's share of it.
    "dots3_note_text": dict(
        per_layer_config=None,
        **INDEXER,
        num_key_value_heads=SHRINK["num_attention_heads"],
        layer_types=default_layers(0, 1),
        mlp_layer_types=["dense", "sparse"],
        shared_experts_intermediate_size=32,
        rope_parameters={"indexed_attention": dict(rope_type="default", rope_theta=8e7, partial_rotary_factor=0.5)},
    ),
    # Linear attention, then attention (the defaults' first 3 to 7 layers are linear), MoE in both
    "qwen3_next": dict(**GATED_DELTANET, layer_types=["linear_attention", "full_attention"]),
    "qwen3_5_moe_text": dict(**GATED_DELTANET, layer_types=["linear_attention", "full_attention"]),
    "kimi_linear": dict(
        **MLA, **LINEAR_HEADS, layer_types=["linear_attention", "full_attention"], mlp_layer_types=["dense", "sparse"]
    ),
    "bailing_hybrid": dict(
        **MLA, **LINEAR_HEADS, layer_types=["linear_attention", "full_attention"], mlp_layer_types=["sparse", "sparse"]
    ),
    "glm5_next_text": dict(
        **MLA,
        **INDEXER,
        **LINEAR_HEADS,
        layer_types=default_layers(0, 3),
        mlp_layer_types=["sparse", "sparse"],
        indexer_types=default_layers(0, 1),
    ),
    # ... with Qwen4's QSA indexer, whose sizes the default leaves None (it builds no model); its
    # budget, 16 tokens, keeps all the test's 9
    "qwen4_exp_text": dict(
        **GATED_DELTANET,
        layer_types=default_layers(0, 3),
        indexer_n_heads=2,
        indexer_kv_heads=1,
        indexer_head_dim=16,
        indexer_budget=16,
        indexer_compress_ratio=4,
    ),
    # Mamba, then attention (the default's period 8 puts attention at layer 4), MoE in both
    "jamba": dict(
        attn_layer_period=2, attn_layer_offset=1, expert_layer_period=1, expert_layer_offset=0, mamba_dt_rank=8
    ),
    "granitemoehybrid": dict(
        layer_types=["linear_attention", "full_attention"], mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16
    ),
    # Mamba 2, MoE, attention, MoE (its layers are its layers_block_type: 52 in the default)
    "nemo_speechlm": dict(
        layers_block_type=["linear_attention", "moe", "full_attention", "moe"],
        mamba_num_heads=8,
        mamba_head_dim=16,
        ssm_state_size=16,
        moe_shared_expert_intermediate_size=32,
    ),
    # A short convolution, then attention; the default's layer_types is None (it builds no model)
    # and its first 2 layers are dense
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=0),
    # The default's first layers are dense: 3 (beam), 2 (flint); deepseek_ocr2's mlp_layer_types
    # and top-k are None (it builds no model)
    "beam": dict(mlp_layer_types=["dense", "sparse"]),
    "flint": dict(mlp_only_layers=[0]),
    "deepseek_ocr2": dict(mlp_layer_types=["dense", "sparse"], num_experts_per_tok=2),
    # M-RoPE over head_dim 16 x partial_rotary_factor 0.5
    "glm4v_moe_text": dict(rope_parameters=dict(**M_ROPE, partial_rotary_factor=0.5, mrope_section=[2, 1, 1])),
    # M-RoPE over head_dim 16; the text and vision experts' sizes
    "ernie4_5_vl_moe": dict(
        rope_parameters=dict(**M_ROPE, mrope_section=[3, 3, 2]),
        moe_intermediate_size=[SHRINK["moe_intermediate_size"]] * 2,
    ),
}
# A multimodal family's language model is its *_text family's.
SHRUNK_OVERRIDES.update(
    {
        f: SHRUNK_OVERRIDES[f + "_text"]
        for f in ("dots3_note", "glm4v_moe", "glm5_next", "hy_v4_vl", "mistral_large4", "qwen3_5_moe", "qwen4_exp")
    }
)

# Inputs beyond input_ids (a function of them) that a family's model needs so that every experts
# module runs: Ernie 4.5 VL's MoE layers have text and vision experts, and the tokens that
# moe_mm_token_type_ids marks (every other one here) go to the vision ones.
EXTRA_INPUTS = {
    "ernie4_5_vl_moe": lambda ids: dict(moe_mm_token_type_ids=(torch.arange(ids.shape[1]) % 2).expand_as(ids)),
}

# Families that expert_parallel() accepts, beyond NAMES (tiny configs of their own above), each
# built from its default config shrunk (shrunk_config: SHRINK and SHRUNK_OVERRIDES) with MoE
# layers on the experts interface; the CPU tests hold each to transformers' eager experts. A
# multimodal family (aria, glm4v_moe, kimi_k25, llama4, qwen3_vl_moe, ...) runs its language model
# alone, of its shrunk text_config (shrunk_model), next to its *_text family where transformers has
# one. Families of transformers 5.24 (CI's); the tests skip those the installed one lacks.
# muse_spark's experts normalise each expert's output before the routing weight
# (has_post_expert_norm): the test that found the backend skipping that norm.
SHRUNK_NAMES = [
    "afmoe",
    "aria",
    "aria_text",
    "axk1",
    "axk2",
    "bailing_hybrid",
    "beam",
    "cohere2_moe",
    "deepseek_ocr2",
    "deepseek_v2",
    "deepseek_v32",
    "deepseek_v4",
    "dots3_note",
    "dots3_note_text",
    "ernie4_5_moe",
    "ernie4_5_vl_moe",
    "exaone_moe",
    "flex_olmo",
    "flint",
    "glm4_moe",
    "glm4_moe_lite",
    "glm4v_moe",
    "glm4v_moe_text",
    "glm5_next",
    "glm5_next_text",
    "glm_moe_dsa",
    "granitemoe_swa",
    "granitemoehybrid",
    "granitemoeshared",
    "hy_v3",
    "hy_v4",
    "hy_v4_vl",
    "hy_v4_vl_text",
    "inkling2",
    "inkling2_loop",
    "inkling2_loop_text",
    "inkling2_text",
    "inkling_mm_model",
    "inkling_text",
    "jamba",
    "kimi_k25",
    "kimi_linear",
    "kolibri1",
    "laguna",
    "lara_mini",
    "lfm2_moe",
    "llama4",
    "mellum",
    "mimo_v2_flash",
    "minimax",
    "minimax_m2",
    "minimax_m3_vl",
    "minimax_m3_vl_text",
    "mistral4",
    "mistral_large4",
    "mistral_large4_text",
    "muse_spark",
    "muse_spark_text",
    "nemo_speechlm",
    "nemotron_h",
    "openai_privacy_filter",
    "phimoe",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "qwen3_next",
    "qwen3_omni_moe_thinker",
    "qwen3_vl_moe",
    "qwen3_vl_moe_text",
    "qwen4_exp",
    "qwen4_exp_text",
    "sarvam_mla",
    "sarvam_moe",
    "solar_open",
    "unlimited_ocr",
    "zaya",
]


def config_field(config, name):
    """config.name, or None (some configs raise on a per-layer field read globally)."""
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001
        return None


def shrunk_config(family):
    """The default config of `family` (a model_type of the installed transformers) with each of
    SHRINK's fields it has as an integer set to SHRINK's value, SHRUNK_OVERRIDES[family]'s in their
    place; those of its text_config where it has one (a multimodal family)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = CONFIG_MAPPING[family]()
    text = config_field(config, "text_config")
    shrunk = config if text is None else text
    overrides = SHRUNK_OVERRIDES.get(family, {})
    for name, value in overrides.items():  # first: they may make SHRINK's fields readable
        setattr(shrunk, name, value(config_field(shrunk, name)) if callable(value) else value)
    for name, value in SHRINK.items():
        if name not in overrides and isinstance(config_field(shrunk, name), int):
            setattr(shrunk, name, value)
    return config


def shrunk_model(family, seed=0, std=0.2):
    """The model of shrunk_config(family) with random weights (random_model); for a multimodal
    family, its language model alone (the class its model holds as language_model), of the shrunk
    text_config: the vision and audio parts run no MoE layer."""
    config = shrunk_config(family)
    text = config_field(config, "text_config")
    if text is None:
        return random_model(config, seed, std)
    with torch.device("meta"):
        whole = AutoModel.from_config(config)
    return random_model(text, seed, std, cls=type(whole.language_model))


def meta_model(config):
    """transformers' model for `config` on the meta device (no memory, no weights), the causal-LM
    class if the family has one, and None and why where none builds."""
    error = "no auto class"
    for auto in (AutoModelForCausalLM, AutoModel):
        try:
            with torch.device("meta"):
                return auto.from_config(config), None
        except Exception as e:  # noqa: BLE001  (a default config that does not build is reported)
            error = f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"
    return None, error
