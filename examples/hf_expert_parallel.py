"""A Hugging Face transformers MoE model, data-parallel + expert-parallel on moe_a2a:
    torchrun --nproc-per-node=<GPUs> examples/hf_expert_parallel.py

A small DeepSeek-V3-shaped model with random weights (no download; with a checkpoint, use
from_pretrained the same way on every rank). Each rank generates for its own prompts, of its
own lengths and count; moe_tf.generate keeps the ranks in step until all are done."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))  # in-tree checkout
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from transformers import AutoModelForCausalLM, DeepseekV3Config  # noqa: E402

import moe_a2a.integrations.transformers as moe_tf  # noqa: E402  (before init_process_group: NVLink multicast off)

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
rank, world = dist.get_rank(), dist.get_world_size()

config = DeepseekV3Config(
    vocab_size=4096, hidden_size=1024, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
    intermediate_size=2048, moe_intermediate_size=512, n_routed_experts=16 * world, num_experts_per_tok=8, n_group=4,
    topk_group=2, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=256, kv_lora_rank=128,
    qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64,
)  # fmt: skip
torch.manual_seed(0)  # the same weights on every rank
model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).cuda().eval()

moe_tf.expert_parallel(model, max_num_tokens=512)  # collective: keeps this rank's 16 experts per layer
prompts = torch.randint(0, config.vocab_size, (1 + rank, 16 + 8 * rank), device="cuda")  # per-rank count, length
out = moe_tf.generate(model, input_ids=prompts, max_new_tokens=16 + 4 * rank, do_sample=False)
print(f"rank {rank}: {tuple(prompts.shape)} prompts -> {tuple(out.shape)} tokens; first: {out[0, -8:].tolist()}")
moe_tf.close(model)
dist.destroy_process_group()
