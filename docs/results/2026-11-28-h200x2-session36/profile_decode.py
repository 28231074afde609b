"""Where a decode step of bench_hf_model's model spends its device time, per kernel, for (a) moe_a2a
DP+EP and (b) transformers EP, eager and replayed from a CUDA graph (session 36, issue 37).

torchrun --nproc-per-node=2 profile_decode.py OUTDIR [B ...]   (PYTHONPATH=python:benchmarks)

Each step runs as bench_hf_model times it (flush, preroll sleep, ranks aligned, then the step), under
torch.profiler; a step's kernels are those whose launch falls in its record_function range (matched
by CUPTI correlation id, which a graph's kernels share with their cudaGraphLaunch). Per step: kernel
count, span (first kernel start to last kernel end: what bench_hf_model's events measure), busy (the
union of the kernels' intervals) and their difference (the gaps). Rank 0's summary goes to stdout and
OUTDIR/summary-rank0.txt; every rank writes its kernel table as JSON.
"""

# ruff: noqa: I001  (common must load before torch)
import collections
import json
import os
import statistics
import sys

import common  # noqa: F401  (first: moe_a2a pins multicast off before torch loads)
import bench_hf_model as bhm
import torch
from torch.profiler import ProfilerActivity, profile, record_function

STEPS = 6


def step_kernels(trace_path):
    """{step name: [(start, end, kernel name)]} from a chrome trace."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("step/")]
    launch_step = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            for s in steps:
                if s["ts"] <= e["ts"] <= s["ts"] + s["dur"]:
                    launch_step[e["args"]["correlation"]] = s["name"]
    out = collections.defaultdict(list)
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            s = launch_step.get(e.get("args", {}).get("correlation"))
            if s is not None:
                out[s].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    return out


def busy_us(intervals):
    total, end = 0.0, -1e30
    for s, e, _ in sorted(intervals):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def summarize(kernels_by_step):
    rows, names = [], collections.defaultdict(list)
    if not kernels_by_step:  # no kernel matched a step (say, a graph's kernels not correlated with its launch)
        return {"kernels": 0, "span_us": 0.0, "busy_us": 0.0, "by_name": {}}
    for ks in kernels_by_step.values():
        ks.sort()
        rows.append((len(ks), ks[-1][1] - ks[0][0], busy_us(ks)))
        per = collections.defaultdict(lambda: [0, 0.0])
        for s, e, n in ks:
            per[n][0] += 1
            per[n][1] += e - s
        for n, (c, d) in per.items():
            names[n].append((c, d))
    med = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
    table = {n[:90]: (statistics.median(c for c, _ in v), statistics.median(d for _, d in v)) for n, v in names.items()}
    return {"kernels": med(0), "span_us": med(1), "busy_us": med(2), "by_name": table}


def main():
    outdir, batches = sys.argv[1], [int(b) for b in sys.argv[2:]] or [1, 8]
    os.makedirs(outdir, exist_ok=True)
    args = bhm.parse_args(["--batches", ",".join(map(str, batches)), "--out", outdir])
    import transformers
    from transformers import DeepseekV3Config

    import moe_a2a.integrations.transformers as moe_tf
    from moe_a2a.integrations.decode_graph import DecodeGraph

    transformers.logging.set_verbosity_error()
    ctx = common.init_distributed()
    config = DeepseekV3Config(**bhm.config_kwargs(args.model_table, ctx.world, args.max_positions))
    flusher = common.L2Flusher(ctx.device, args.flush_mib * common.MiB, args.preroll_us)
    inputs = bhm.Inputs(ctx, args, config.vocab_size)
    results = {}
    with torch.no_grad():
        for system in ("moe_a2a", "hf_ep"):
            model, close = bhm.BUILDERS[system](ctx, config, args)
            own = system == "moe_a2a"
            for b in batches:
                prompts = inputs.prompts_for(b, own)
                block = (lambda n: moe_tf.tokens_per_forward(model, n)) if own else (lambda n: _nothing())
                for mode in ("eager", "graph"):
                    with block(b * args.prompt_len):
                        cache = bhm.static_cache_after_prefill(model, prompts, 64)
                    with block(b):
                        if mode == "eager":
                            fn = lambda t: model(input_ids=t, past_key_values=cache, use_cache=True, logits_to_keep=1)  # noqa: E731
                        else:
                            fn = DecodeGraph(model, cache)
                            i = 0
                            while not fn.captured:
                                fn(inputs.step_for(i, b, own))
                                i += 1
                        for i in range(3):
                            fn(inputs.step_for(20 + i, b, own))
                        trace = os.path.join(outdir, f"trace-{system}-B{b}-{mode}-rank{ctx.rank}.json")
                        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                            for i in range(STEPS):
                                t = inputs.step_for(30 + i, b, own)
                                common.before_timed_region(ctx, flusher)
                                with record_function(f"step/{i}"):
                                    fn(t)
                                torch.cuda.synchronize()
                        prof.export_chrome_trace(trace)
                    results[f"{system} B={b} {mode}"] = summarize(step_kernels(trace))
                    if not (ctx.rank == 0 and b == batches[0]):  # one rank's traces of one B are kept
                        os.remove(trace)
                    cache = fn = None
            if close is not None:
                close()
            model = None
            torch.cuda.empty_cache()
    with open(os.path.join(outdir, f"kernels-rank{ctx.rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    if ctx.rank == 0:
        lines = []
        for key, r in results.items():
            lines.append(
                f"{key}: {r['kernels']} kernels, span {r['span_us']:.1f} us, busy {r['busy_us']:.1f} us, "
                f"gaps {r['span_us'] - r['busy_us']:.1f} us"
            )
        for b in batches:
            for mode in ("eager", "graph"):
                a, h = results[f"moe_a2a B={b} {mode}"]["by_name"], results[f"hf_ep B={b} {mode}"]["by_name"]
                lines.append(f"\n== B={b} {mode}: kernel (count, us per step): (a) moe_a2a | (b) transformers EP")
                for n in sorted(set(a) | set(h), key=lambda n: -max(a.get(n, (0, 0))[1], h.get(n, (0, 0))[1])):
                    ca, da = a.get(n, (0, 0.0))
                    ch, dh = h.get(n, (0, 0.0))
                    lines.append(f"{ca:6g} {da:8.1f} | {ch:6g} {dh:8.1f}  {n}")
        text = "\n".join(lines)
        print(text)
        with open(os.path.join(outdir, "summary-rank0.txt"), "w") as f:
            f.write(text + "\n")
    torch.distributed.destroy_process_group()


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
