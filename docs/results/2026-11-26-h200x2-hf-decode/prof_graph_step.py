# untracked experiment: the graph decode step's device time, and its kernels (torch.profiler
# over eager StaticCache steps), for moe_a2a DP+EP at two max_num_tokens and for one GPU
import sys

sys.path.insert(0, "benchmarks")
import common  # noqa
import torch
import torch.distributed as dist
import bench_hf_model as B
import moe_a2a.integrations.transformers as moe_tf
from moe_a2a.integrations.decode_graph import DecodeGraph
from transformers import DeepseekV3Config, StaticCache

args = B.parse_args(["--batches", "1"])
ctx = common.init_distributed()
config = DeepseekV3Config(**B.config_kwargs(args.model_table, ctx.world, 512))
inputs = B.Inputs(ctx, args, config.vocab_size)
batch = int(sys.argv[1]) if len(sys.argv) > 1 else 1


def table(p):
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            return p.key_averages().table(sort_by=key, row_limit=22, max_name_column_width=70)
        except Exception:
            pass


def run(tag, model, own):
    toks = lambda i: inputs.step_for(i % inputs.steps.shape[0], batch, own)
    prompts = inputs.prompts_for(batch, own)
    ok = model is not None
    if ok:
        cache = StaticCache(config=model.config, max_cache_len=300)
        with torch.no_grad():
            model(input_ids=prompts, past_key_values=cache, use_cache=True, logits_to_keep=1)
        step = DecodeGraph(model, cache)
        for i in range(3):
            step(toks(i))
        # eager steps for the profile would move the cache behind the graph's back: profile replays
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
            for i in range(5):
                step(toks(i))
            torch.cuda.synchronize()
    dist.barrier()
    us = common.time_device(ctx, lambda t: step(t) if ok else None, 40, 3, prepare=toks)
    us.sort()
    if ctx.rank == 0:
        print(f"== {tag} B={batch}: graph step median {us[len(us) // 2]:.1f} us (max over ranks)", flush=True)
        if ok:
            print(table(p), flush=True)
    dist.barrier()


for mnt in (4096, 64):
    model = B.build_full(ctx, config, args)
    moe_tf.expert_parallel(model, ctx.group, max_num_tokens=mnt)
    run(f"moe_a2a max_num_tokens={mnt}", model, True)
    moe_tf.close(model)
    del model
    torch.cuda.empty_cache()
model = B.build_full(ctx, config, args) if ctx.rank == 0 else None
run("one_gpu", model, False)
dist.destroy_process_group()
