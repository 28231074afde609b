"""Expert-parallel MoE layer on every GPU: torchrun --nproc-per-node=<GPUs> examples/moe_layer.py"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))  # in-tree checkout
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from moe_a2a.layers import ExpertParallelMoE  # noqa: E402  (first: importing moe_a2a turns NVLink multicast off)

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
rank, world = dist.get_rank(), dist.get_world_size()
with ExpertParallelMoE(
    hidden_dim=2048,
    ffn_dim=1024,
    num_experts=8 * world,
    experts_per_token=4,
    max_num_tokens=256,
    dtype=torch.bfloat16,
    layout="packed",
) as moe:  # collective: same arguments everywhere
    x = torch.randn(200 + 8 * rank, 2048, device="cuda", dtype=torch.bfloat16, requires_grad=True)  # T may differ
    out = moe(x)  # route -> dispatch -> experts -> combine
    out.float().square().mean().backward()  # collective: every rank runs backward
    moe.all_reduce_router_grad()  # router is data parallel
    print(
        f"rank {rank}: |out| = {out.float().norm():.3f}, |grad w_down| = {moe.w_down.grad.float().norm():.3f}, "
        f"|grad x| = {x.grad.float().norm():.3f}"
    )
dist.destroy_process_group()
