"""Tiny transformers MoE models with random weights (no download), shared by the CPU and GPU
tests of moe_a2a.integrations.transformers."""

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


def build(name, seed=0, **overrides):
    """The tiny model `name` with random weights (`overrides`: config fields to change)."""
    config = tiny_configs()[name]
    for field, value in overrides.items():
        setattr(config, field, value)
    return random_model(config, seed)


def random_model(config, seed=0, std=0.05):
    """The causal LM of `config` in fp32, every weight drawn (from_config leaves some at zero or one)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
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

# Families that expert_parallel() accepts whose default config, shrunk (shrunk_config), builds a
# model with MoE layers on the experts interface; the CPU tests hold each to transformers' eager
# experts. NAMES' families have tiny configs of their own above and are not repeated. Accepted
# families left out: multimodal ones (their causal-LM part is a *_text family, listed where it
# builds), MLA ones (deepseek_v2, axk1/2, sarvam_mla, hy_v4: the shrunk head dims disagree), and
# those whose shrunk config has no MoE layer or only linear-attention layers (docs/transformers.md).
SHRUNK_NAMES = [
    "afmoe",
    "aria_text",
    "cohere2_moe",
    "deepseek_v4",
    "ernie4_5_moe",
    "exaone_moe",
    "flex_olmo",
    "glm4_moe",
    "glm4_moe_lite",
    "granitemoe_swa",
    "granitemoeshared",
    "hy_v3",
    "inkling2_loop_text",
    "inkling2_text",
    "inkling_text",
    "kolibri1",
    "laguna",
    "lara_mini",
    "mellum",
    "mimo_v2_flash",
    "minimax",
    "minimax_m2",
    "minimax_m3_vl_text",
    "nemotron_h",
    "phimoe",
    "sarvam_moe",
    "solar_open",
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
    SHRINK's fields it has as an integer set to SHRINK's value."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = CONFIG_MAPPING[family]()
    for name, value in SHRINK.items():
        if isinstance(config_field(config, name), int):
            setattr(config, name, value)
    return config


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
