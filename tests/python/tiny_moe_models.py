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
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    for p in model.parameters():  # from_config leaves some at zero or one; give every weight a value
        torch.nn.init.normal_(p, std=0.05)
    return model.eval()


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
