"""CUDA-graph steady state of moe_a2a dispatch + combine, next to its eager device time.

    torchrun --nproc-per-node=<N> benchmarks/bench_graph.py [--shapes ...] [--out DIR]

What a serving engine sees: N iterations of dispatch -> combine (no expert computation in
between; --gemm adds the fake grouped GEMM) captured in one CUDA graph, cycling through
--inputs >= 8 different routings and token sets so the replay never repeats one routing;
per-iteration time = replay time / N, max over ranks per replay, median and p10-p90 over
replays. Eager: device events around dispatch and around combine on every rank (the host
queued ahead behind a GPU busy-wait, so launch overhead is excluded), max over ranks, median
over iterations. Speed of light per phase from moe_a2a.sol.phase_bound_us: the larger of the
link bytes over B and each rank's local memory bytes over B_local, plus L, all three measured
in this run (benchmarks/microbench.py); "bound" says which term it was. World size comes from
torchrun.
"""
import common  # noqa: F401  (first: pins multicast off before torch.distributed)
import argparse
import os

import torch
import torch.distributed as dist

from bench_all2all import get_micro
from common import fmt, summarize


def speed_of_light(ctx, shape, pool, micro):
    """(median us of dispatch + combine over the pool's routings, the term that bound it)."""
    from moe_a2a import sol
    times, bounds = [], []
    for j in range(len(pool)):
        routing = pool.routing(j)
        phases = sol.phase_bytes(routing, shape.experts, ctx.world, shape.hidden, shape.dtype)
        local = sol.local_bytes(routing, shape.experts, ctx.world, shape.hidden, shape.dtype)
        total = 0.0
        for p in phases:
            us, bound = sol.phase_bound_us(p.bytes_out, p.bytes_in, local, micro["B_GBps"], micro["B_local_GBps"],
                                           micro["L_us"])
            total += us
            bounds.append(bound)
        times.append(total)
    return summarize(times)["median"], max(set(bounds), key=bounds.count)

DEFAULT_SHAPES = (common.CHALLENGE_SHAPES + ";256,8,7168,1;256,8,7168,128;256,8,7168,1024;256,8,7168,4096")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help='"E,K,H,T[,dtype[,seed]];..." (T = tokens per rank)')
    p.add_argument("--layout", default="packed", choices=["packed", "padded"])
    p.add_argument("--inputs", type=int, default=8, help="distinct routings captured in the graph (>= 8)")
    p.add_argument("--replays", type=int, default=20, help="timed graph replays (default 20)")
    p.add_argument("--iters", type=int, default=50, help="timed eager iterations (default 50)")
    p.add_argument("--gemm", action="store_true", help="also the pipeline dispatch -> fake GEMM -> combine")
    p.add_argument("--no-microbench", action="store_true", help="use BENCHMARKS.md's B and L (labelled)")
    p.add_argument("--out", default=os.path.join(common.BENCH_DIR, "results"))
    args = p.parse_args(argv)
    if args.inputs < 8:
        p.error("--inputs must be >= 8 (the graph must not replay one routing)")
    args.shape_list = common.parse_shapes(args.shapes)
    return args


def graph_us(ctx, step, n_inputs, per_graph, replays):
    """Per-iteration us of `per_graph` calls of step(i) captured in one graph, per replay, max
    over ranks."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture, as torch requires
        for i in range(n_inputs):
            step(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_graph):
            step(i % n_inputs)
    times = []
    for r in range(replays + 2):
        ctx.align()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        if r >= 2:
            times.append(start.elapsed_time(end) * 1e3 / per_graph)
    del graph
    return common.max_over_ranks(ctx, times)


def eager_us(ctx, ep, pool, iters, flusher):
    """(dispatch us, combine us) per iteration, device events, max over ranks."""
    d_us, c_us = [], []
    for i in range(iters + 5):
        x, idx, w = pool.get(i)
        ctx.align()
        flusher.flush()
        a, m, b = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        d = ep.dispatch(x, idx, w)
        m.record()
        ep.combine(d.expert_x, d)
        b.record()
        b.synchronize()
        if i >= 5:
            d_us.append(a.elapsed_time(m) * 1e3)
            c_us.append(m.elapsed_time(b) * 1e3)
    return common.max_over_ranks(ctx, d_us), common.max_over_ranks(ctx, c_us)


def bench_shape(ctx, shape, args, micro, flusher):
    import moe_a2a
    from fake_gemm import scale_segments
    pool = common.InputPool(ctx, shape, args.inputs, num_tokens=shape.max_tokens)
    sol_us, bound = speed_of_light(ctx, shape, pool, micro)
    ep = moe_a2a.AllToAll(ctx.group, shape.experts, shape.topk, shape.hidden, shape.max_tokens, shape.dtype,
                          layout=args.layout)

    def step(i):
        x, idx, w = pool.get(i)
        d = ep.dispatch(x, idx, w)
        return ep.combine(d.expert_x, d)

    def pipeline(i):
        x, idx, w = pool.get(i)
        d = ep.dispatch(x, idx, w)
        rows = d.expert_x.view(-1, shape.hidden)
        y = torch.empty_like(rows)
        scale_segments(rows, y, d.expert_offsets[:-1], d.expert_num_tokens, ep.capacity, 1 + ctx.rank)
        return ep.combine(y.view_as(d.expert_x), d)

    per_graph = max(args.inputs, 8 * args.inputs if shape.max_tokens <= 256 else args.inputs)
    row = {"shape": shape.label, "tokens": shape.max_tokens, "world": ctx.world, "layout": args.layout,
           "sol_us": sol_us, "sol_bound": bound, "inputs_in_graph": args.inputs,
           "iters_per_graph": per_graph}
    g = summarize(graph_us(ctx, step, args.inputs, per_graph, args.replays))
    row.update(graph_us_median=g["median"], graph_us_p10=g["p10"], graph_us_p90=g["p90"])
    if args.gemm:
        p = summarize(graph_us(ctx, pipeline, args.inputs, per_graph, args.replays))
        row.update(graph_pipeline_us_median=p["median"], graph_pipeline_us_p10=p["p10"],
                   graph_pipeline_us_p90=p["p90"])
    d_us, c_us = eager_us(ctx, ep, pool, args.iters, flusher)
    for name, us in (("dispatch", d_us), ("combine", c_us)):
        s = summarize(us)
        row.update({f"eager_{name}_us_median": s["median"], f"eager_{name}_us_p10": s["p10"],
                    f"eager_{name}_us_p90": s["p90"]})
    row["graph_x_sol"] = row["graph_us_median"] / row["sol_us"]
    ep.synchronize()
    ep.close()
    return row


def main():
    args = parse_args()
    ctx = common.init_distributed()
    micro = get_micro(ctx, args)
    flusher = common.L2Flusher(ctx.device, preroll_us=1000.0)
    rows = []
    for shape in args.shape_list:
        rows.append(bench_shape(ctx, shape, args, micro, flusher))
        if ctx.rank == 0:
            r = rows[-1]
            print(f"{r['shape']:22s} graph d+c {fmt(r['graph_us_median'])} us ({fmt(r['graph_us_p10'])}-"
                  f"{fmt(r['graph_us_p90'])}), x SoL {fmt(r['graph_x_sol'], 2)}; eager dispatch "
                  f"{fmt(r['eager_dispatch_us_median'])}, combine {fmt(r['eager_combine_us_median'])}"
                  + (f"; graph pipeline {fmt(r['graph_pipeline_us_median'])}" if args.gemm else ""), flush=True)
    if ctx.rank == 0:
        heads = ["shape", "graph d+c us", "p10", "p90", "SoL d+c", "bound", "x SoL", "eager dispatch",
                 "eager combine"]
        common.print_table(heads, [[r["shape"], fmt(r["graph_us_median"]), fmt(r["graph_us_p10"]),
                                    fmt(r["graph_us_p90"]), fmt(r["sol_us"]), r["sol_bound"], fmt(r["graph_x_sol"], 2),
                                    fmt(r["eager_dispatch_us_median"]), fmt(r["eager_combine_us_median"])]
                                   for r in rows])
        meta = dict(common.metadata(ctx), micro=micro, args=vars(args) | {"shape_list": None})
        common.write_json(os.path.join(args.out, "bench_graph.json"), {"meta": meta, "rows": rows})
        common.write_csv(os.path.join(args.out, "bench_graph.csv"), rows)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
