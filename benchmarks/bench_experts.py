"""The local experts' two linear layers at decode sizes, one GPU: torch._grouped_mm against
moe_a2a's grouped_gemv (each rows_per_pass), next to this GPU's floor for the bytes (the active
experts' weights read once, at the copy bandwidth measured in the same run).

    PYTHONPATH=python python3 benchmarks/bench_experts.py [--tokens 1,2,4,8,16,32,64] [--json OUT.json]

Rows are routed as dispatch would deliver them to rank 0 of `world` ranks: world x tokens tokens,
each with top-k distinct experts drawn uniformly from world x local experts; rank 0's experts
get their rows packed (expert_offsets, expert_num_tokens), in a buffer of dispatch's capacity
(world x tokens x min(k, local experts) rows) whose other rows hold noise. Each case is the
gate/up projection ([E, 2I, H]) then the down projection ([E, H, I]), both in nn.Linear's
layout per expert (transformers' default; with --layouts out, contiguous along out, as gpt-oss's
and moe_a2a.layers' weights), 8 routings cycled in one CUDA graph of 20 calls, replayed 30 times:
the time per call, median (p10-p90). grouped_gemv's output is checked against torch._grouped_mm's
on the experts' rows (largest difference over the largest value).

The "layer" columns time what the transformers integration runs for experts with the default SiLU
gate, the activation included, at the rows a pass the integration picks (rows_per_pass of tokens x
top-k / local experts, its rows an expert): "act apart" the up projection, silu(gate) * up over its
halves and the down projection (4 kernels); "fused" the up projection with the SwiGLU fused
(swiglu=True) and the down projection (2 kernels). Weights along in only (the fused kernel's
layout); "-" along out. The fused output is checked against the chain.
"""

import argparse

import common  # noqa: F401  (first: pins NVLink multicast off before torch loads)
import torch
from common import capture_steps, metadata, print_table, summarize, write_json

from moe_a2a.grouped_gemv import grouped_gemv, rows_per_pass
from moe_a2a.microbench import replay_times_us

# name: (world, local experts, top-k, hidden, expert FFN)
SHAPES = {
    "hf-default-w2": (2, 32, 8, 2048, 1408),  # bench_hf_model.py's model at world 2
    "dsv3-w2": (2, 128, 8, 7168, 2048),  # DeepSeek-V3 at world 2
    "dsv3-w8": (8, 32, 8, 7168, 2048),  # DeepSeek-V3 at world 8 (rank 0's share)
}
PASSES = (0, 1, 2, 4)  # 0: the automatic mode, what the integrations use
ROUTINGS = 8
CALLS_PER_GRAPH = 20
REPLAYS = 30


def copy_GBps(device, mib=256, reps=20):
    """Bytes read + written per second by a copy of `mib` MiB: this run's HBM bandwidth."""
    a = torch.empty(mib << 20, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        b.copy_(a)
    end.record()
    torch.cuda.synchronize()
    return 2 * a.numel() * reps / (start.elapsed_time(end) * 1e-3) / 1e9


def routing(world, local, k, tokens, gen, device):
    """counts [local], offsets [local + 1] (int32, on device), capacity rows, active experts."""
    scores = torch.rand(world * tokens, world * local, generator=gen)
    picked = scores.topk(k, dim=1).indices.flatten()
    counts = torch.bincount(picked[picked < local], minlength=local).to(torch.int32)
    offsets = torch.zeros(local + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(counts, 0)
    capacity = world * tokens * min(k, local)
    return counts.to(device), offsets.to(device), capacity, int((counts > 0).sum())


def time_calls(step):
    """Per-call device time in us of step(i) (i cycles over the routings), one value a replay,
    each replay started on an idle GPU."""
    graph = capture_steps(step, ROUTINGS, CALLS_PER_GRAPH)
    return replay_times_us(graph, CALLS_PER_GRAPH, REPLAYS, 2, torch.cuda.synchronize)


def weights(local, out, in_, layout, device):
    """[local, out, in_] bf16, contiguous along `layout` ("in": nn.Linear's per expert; "out": the
    transpose of an [local, in_, out] tensor, gpt-oss's and moe_a2a.layers' layout)."""
    shape = (local, out, in_) if layout == "in" else (local, in_, out)
    w = torch.randn(*shape, device=device, dtype=torch.bfloat16) * in_**-0.5
    return w if layout == "in" else w.transpose(1, 2)


def run_shape(name, tokens_list, device, gbps, layout):
    world, local, k, hidden, ffn = SHAPES[name]
    gen = torch.Generator().manual_seed(0)
    w_up = weights(local, 2 * ffn, hidden, layout, device)
    w_down = weights(local, hidden, ffn, layout, device)
    expert_bytes = (w_up[0].numel() + w_down[0].numel()) * 2
    rows = []
    for tokens in tokens_list:
        routes = [routing(world, local, k, tokens, gen, device) for _ in range(ROUTINGS)]
        capacity = routes[0][2]
        xs = [torch.randn(capacity, hidden, device=device, dtype=torch.bfloat16) for _ in range(ROUTINGS)]
        hs = [torch.randn(capacity, ffn, device=device, dtype=torch.bfloat16) for _ in range(ROUTINGS)]
        active = sum(r[3] for r in routes) / ROUTINGS
        floor_us = active * expert_bytes / (gbps * 1e3)

        def grouped_mm(i):
            offs = routes[i][1][1:]
            torch._grouped_mm(xs[i], w_up.transpose(-1, -2), offs=offs)
            torch._grouped_mm(hs[i], w_down.transpose(-1, -2), offs=offs)

        def gemv(p):
            def step(i):
                counts, offsets = routes[i][0], routes[i][1]
                grouped_gemv(xs[i], w_up, offsets, counts, p)
                grouped_gemv(hs[i], w_down, offsets, counts, p)

            return step

        integration_pass = rows_per_pass(tokens * k / local)  # as grouped_linear picks it

        def layer(fused):
            def step(i):
                counts, offsets, p = routes[i][0], routes[i][1], integration_pass
                if fused:
                    h = grouped_gemv(xs[i], w_up, offsets, counts, p, swiglu=True)
                else:
                    gate, up = grouped_gemv(xs[i], w_up, offsets, counts, p).chunk(2, dim=-1)
                    h = torch.nn.functional.silu(gate) * up
                grouped_gemv(h, w_down, offsets, counts, p)

            return step

        # correctness on every routing: the experts' rows against grouped_mm's
        worst = 0.0
        for i in range(ROUTINGS):
            counts, offsets = routes[i][0], routes[i][1]
            n = int(offsets[-1])
            ref = torch._grouped_mm(xs[i], w_up.transpose(-1, -2), offs=offsets[1:])[:n].float()
            for p in PASSES:
                got = grouped_gemv(xs[i], w_up, offsets, counts, p)[:n].float()
                worst = max(worst, float((got - ref).abs().max() / ref.abs().max().clamp(min=1e-30)))
            if layout == "in":
                gate, up = grouped_gemv(xs[i], w_up, offsets, counts).chunk(2, dim=-1)
                want = (torch.nn.functional.silu(gate) * up)[:n].float()
                got = grouped_gemv(xs[i], w_up, offsets, counts, swiglu=True)[:n].float()
                worst = max(worst, float((got - want).abs().max() / want.abs().max().clamp(min=1e-30)))
        row = {
            "shape": name,
            "w_layout": layout,
            "tokens": tokens,
            "capacity": capacity,
            "active_experts": active,
            "floor_us": floor_us,
            "max_rel_diff": worst,
        }
        row["grouped_mm"] = summarize(time_calls(grouped_mm))
        for p in PASSES:
            row[f"gemv{p}"] = summarize(time_calls(gemv(p)))
        if layout == "in":
            row["layer_act_apart"] = summarize(time_calls(layer(False)))
            row["layer_fused"] = summarize(time_calls(layer(True)))
        rows.append(row)
        layers = (
            f", layer act apart {row['layer_act_apart']['median']:.1f}, fused {row['layer_fused']['median']:.1f}"
            if layout == "in"
            else ""
        )
        print(
            f"{name} w along {layout} T={tokens}: grouped_mm {row['grouped_mm']['median']:.1f} us, "
            + ", ".join(f"gemv{p} {row[f'gemv{p}']['median']:.1f}" for p in PASSES)
            + layers
            + f", floor {floor_us:.1f} (active {active:.1f}, diff {worst:.1e})",
            flush=True,
        )
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", default="1,2,4,8,16,32,64", help="tokens a rank, comma-separated")
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)}")
    p.add_argument(
        "--layouts", default="in", help="weights contiguous along in (nn.Linear's), out (x @ w's), or in,out"
    )
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    gbps = copy_GBps(device)
    print(f"{torch.cuda.get_device_name(device)}: copy {gbps:.0f} GB/s (read + written)", flush=True)
    rows = []
    for name in args.shapes.split(","):
        for layout in args.layouts.split(","):
            rows += run_shape(name, [int(t) for t in args.tokens.split(",")], device, gbps, layout)

    def cell(s):
        return f"{s['median']:.1f} ({s['p10']:.1f}-{s['p90']:.1f})" if s is not None else "-"

    print_table(
        ["shape", "w along", "T/rank", "active", "floor us", "grouped_mm"]
        + [f"gemv p={p}" for p in PASSES]
        + ["layer act apart", "layer fused", "diff"],
        [
            [
                r["shape"],
                r["w_layout"],
                r["tokens"],
                f"{r['active_experts']:.1f}",
                f"{r['floor_us']:.1f}",
                cell(r["grouped_mm"]),
            ]
            + [cell(r[f"gemv{p}"]) for p in PASSES]
            + [cell(r.get("layer_act_apart")), cell(r.get("layer_fused"))]
            + [f"{r['max_rel_diff']:.1e}"]
            for r in rows
        ],
    )
    if args.json:
        write_json(args.json, {"meta": metadata(), "copy_GBps": gbps, "rows": rows})


if __name__ == "__main__":
    main()
