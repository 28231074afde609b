# untracked experiment: where the host time of an eager decode step goes (cProfile), and the
# step's wall time with a DynamicCache and with a StaticCache
import cProfile
import io
import pstats
import sys
import time

sys.path.insert(0, "benchmarks")
import common  # noqa
import torch
import torch.distributed as dist
import bench_hf_model as B
from transformers import DeepseekV3Config, StaticCache

args = B.parse_args(["--batches", "1"])
ctx = common.init_distributed()
config = DeepseekV3Config(**B.config_kwargs(args.model_table, ctx.world, 512))
inputs = B.Inputs(ctx, args, config.vocab_size)


def steps(model, cache, own, n, tag, profile=False):
    toks = [inputs.step_for(i % inputs.steps.shape[0], 1, own) for i in range(n + 3)]
    with torch.no_grad():
        for t in toks[:3]:
            model(input_ids=t, past_key_values=cache, use_cache=True, logits_to_keep=1)
        torch.cuda.synchronize()
        dist.barrier()
        pr = cProfile.Profile()
        t0 = time.perf_counter()
        if profile:
            pr.enable()
        for t in toks[3:]:
            model(input_ids=t, past_key_values=cache, use_cache=True, logits_to_keep=1)
        if profile:
            pr.disable()
        host = (time.perf_counter() - t0) / n * 1e3
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / n * 1e3
    print(f"rank {ctx.rank} {tag}: host enqueue {host:.2f} ms/step, wall {wall:.2f} ms/step", flush=True)
    if profile and ctx.rank == 0:
        s = io.StringIO()
        ps = pstats.Stats(pr, stream=s)
        ps.sort_stats("tottime").print_stats(30)
        ps.sort_stats("cumulative").print_stats(45)
        print(s.getvalue()[:20000], flush=True)
    dist.barrier()


for system in ("moe_a2a", "one_gpu"):
    model, close = B.BUILDERS[system](ctx, config, args)
    own = system == "moe_a2a"
    if model is not None:
        prompts = inputs.prompts_for(1, own)
        with torch.no_grad():
            out = model(input_ids=prompts, use_cache=True, logits_to_keep=1)
        steps(model, out.past_key_values, own, 20, f"{system} dynamic", profile=True)
        cache = StaticCache(config=model.config, max_cache_len=256)
        with torch.no_grad():
            model(input_ids=prompts, past_key_values=cache, use_cache=True, logits_to_keep=1)
        steps(model, cache, own, 20, f"{system} static")
    else:
        for _ in range(4):
            dist.barrier()
    if close:
        close()
    del model
    torch.cuda.empty_cache()
dist.destroy_process_group()
