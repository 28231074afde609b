"""One rank of test_transformers_integration's generate-in-step check, on the CPU over gloo:
    python hf_sync_worker.py RANK PORT
Rank 0 generates; rank 1 has no sequences and takes part through moe_tf.generate(input_ids=None).
The exchange is a stand-in whose dispatch and combine are collectives of their own shapes, so a
rank whose sequence of collectives differs from transformers' synced_gpus loop fails (shape
mismatch, or the 20 s timeout) instead of passing. Prints the number of MoE collectives."""

import datetime
import os
import sys
import types

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tiny_moe_models import build  # noqa: E402

import moe_a2a.integrations.transformers as moe_tf  # noqa: E402

calls = []


class CollectiveStandIn:
    layout = "packed"
    max_num_tokens = 4096

    def __init__(self, num_experts):
        self.local = num_experts // dist.get_world_size()

    def dispatch(self, x, idx, w):
        dist.all_reduce(torch.ones(3))  # not the shape of transformers' "unfinished" flag
        calls.append("dispatch")
        return types.SimpleNamespace(
            expert_x=x.new_zeros(0, x.shape[1]),
            expert_offsets=torch.zeros(self.local + 1, dtype=torch.int32),
            expert_num_tokens=torch.zeros(self.local, dtype=torch.int32),
            shape=x.shape,
        )

    def combine(self, y, d):
        dist.all_reduce(torch.ones(5))
        calls.append("combine")
        return y.new_zeros(d.shape)


def main():
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=20)
    )
    moe_tf._Shared.get = lambda self, num_experts, *rest: CollectiveStandIn(num_experts)
    model = moe_tf.expert_parallel(build("mixtral"))
    if rank == 0:
        ids = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(0))
        out = moe_tf.generate(model, ids, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert out.shape == (2, 9), out.shape
    else:
        assert moe_tf.generate(model, input_ids=None) is None
    print(f"moe collectives {len(calls)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
