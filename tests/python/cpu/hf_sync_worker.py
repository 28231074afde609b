"""One rank of test_transformers_integration's generate-in-step check, on the CPU over gloo:
    python hf_sync_worker.py RANK PORT WORLD MODEL
Every rank but the last generates, with 1 or 2 prompts of its own length (as
tests/python/gpu/test_transformers.py does); the last rank has no sequences and takes part through
moe_tf.generate(input_ids=None). The exchange is a stand-in whose dispatch and combine are
collectives of their own shapes, so a rank whose sequence of collectives differs from
transformers' synced_gpus loop fails (shape mismatch, or the 60 s timeout) instead of passing.
Prints the number of MoE collectives and of MoE layers."""

import datetime
import os
import sys
import types

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tiny_moe_models import COMMON, build  # noqa: E402

import moe_a2a.integrations.transformers as moe_tf  # noqa: E402

NEW_TOKENS = 4
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
    rank, port, world, name = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timeout)
    moe_tf._Shared.get = lambda self, num_experts, *rest: CollectiveStandIn(num_experts)
    model = moe_tf.expert_parallel(build(name))
    kwargs = dict(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
    if rank < world - 1:
        shape = (1 + rank % 2, 5 + 3 * rank)
        # ids from 1 up: a 0 (the pad token) in a prompt makes transformers infer padding
        ids = torch.randint(1, COMMON["vocab_size"], shape, generator=torch.Generator().manual_seed(rank))
        out = moe_tf.generate(model, ids, **kwargs)
        assert out.shape == (shape[0], shape[1] + NEW_TOKENS), out.shape
    else:
        assert moe_tf.generate(model, input_ids=None, **kwargs) is None
    print(f"moe collectives {len(calls)} layers {len(moe_tf.moe_experts(model))}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
