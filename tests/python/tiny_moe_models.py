"""Tiny transformers MoE models with random weights (no download), shared by the CPU and GPU
tests of moe_a2a.integrations.transformers."""

import torch
from transformers import AutoModelForCausalLM, DeepseekV3Config, MixtralConfig, Qwen3MoeConfig

COMMON = dict(
    vocab_size=256,
    hidden_size=512,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=128,
)


def tiny_configs():
    """Three routings: softmax top-2 (Mixtral), top-k with renormalisation (Qwen3-MoE), sigmoid
    grouped top-k with shared experts and a dense first layer (DeepSeek-V3)."""
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
    }


def build(name, seed=0):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_configs()[name], dtype=torch.float32)
    for p in model.parameters():  # from_config leaves some at zero or one; give every weight a value
        torch.nn.init.normal_(p, std=0.05)
    return model.eval()
