"""CUDA-graph steady state of moe_a2a dispatch + combine, next to its eager device time.

    torchrun --nproc-per-node=<N> benchmarks/bench_graph.py [--shapes ...] [--counts ...] [--gemm] [--fp8 e4m3fn]
             [--fp8-given] [--capacity N] [--out DIR]

What a serving engine sees: N iterations of dispatch -> combine (no expert computation in
between; --gemm adds the pipeline with the fake grouped GEMM) captured in one CUDA graph,
cycling through --inputs >= 8 different routings and token sets so the replay never repeats
one routing (common.time_graph); per-iteration time = replay time / N, max over ranks per
replay, median and p10-p90 over replays. Eager: device events around dispatch and around
combine on every rank (the host queued ahead behind a GPU busy-wait, so launch overhead is
excluded), max over ranks, median over iterations. Speed of light from moe_a2a.sol.bounds: per
phase the larger of the link term (bytes / B) and the local-memory term (bytes / B_hbm), plus
L, all measured in this run (benchmarks/microbench.py); "bound" says which term it was. "floor"
is the machine's floor for the shape's bytes (a bare exchange, one kernel per phase). World
size comes from torchrun. bench_all2all.py and bench_sweep.py report the same graph timing
next to the other systems; this script is the moe_a2a-only view over a wider set of shapes.

Per-rank token counts (--counts, ';'-separated, each shape run once per spec): "max" (default:
every rank the shape's max tokens), "drawn" (each rank and pool entry its own count, uniform in
1..max as the challenge draws it), "a/b[/c...]" (rank r gets entry r % n; 0 allowed, each entry
<= the shape's max), or the preset "issue35" (per shape: 1/16, 16/1, 4/16, 0/16, 16/16 from 16
tokens, 1/128, 128/1, 128/128 from 128, 64/4096, 4096/4096 from 4096, then drawn and 1/1). Rows
record the spec ("counts") and the counts used per rank; with unequal specs the end of the run
shows each unequal spec's graph d+c next to the equal pair at its larger count (perf_report.py).

Each shape's engine is built for its own T unless --capacity N builds every one for N tokens a
rank, as a serving engine is built for its largest batch and then runs smaller ones.

--fp8 FORMAT runs every shape again with fp8 dispatch, which quantizes the rows in its send half;
--fp8-given a third time with rows quantized before the call (moe_a2a.reference.quantize_fp8, out of
every timed region: dispatch(x_fp8, ..., x_scale=...) sends them as given). Their difference is what
quantizing inside the send half costs the round, to be set against a quantizing pass of its own
(about the bytes of x read and of its fp8 rows and scales written).
"""

import common  # noqa: F401  (first: pins NVLink multicast off before torch.distributed loads)
import microbench
import perf_report
import scaffold
import torch
from bench_all2all import Routing, get_micro, graph_fields, shape_floor
from common import fmt, summarize

DEFAULT_SHAPES = common.CHALLENGE_SHAPES + ";256,8,7168,1;256,8,7168,128;256,8,7168,1024;256,8,7168,4096"
# --shapes ab: the set before/after comparisons of kernel changes use (tools/graph_ab.sh,
# tools/mps_proxy.sh): the challenge shapes and DeepSeek-V3 at 1 and 128 tokens, where the chain
# of one block, not the bandwidth, sets the time.
AB_SHAPES = common.CHALLENGE_SHAPES + ";256,8,7168,1;256,8,7168,128"


def parse_args(argv=None):
    p = scaffold.parser(__doc__)
    p.add_argument(
        "--shapes",
        default=DEFAULT_SHAPES,
        help='"E,K,H,T[,dtype[,seed]];..." (T = tokens per rank), or "ab": the before/after set',
    )
    scaffold.add_counts(p)
    scaffold.add_layout(p, "packed")
    p.add_argument("--inputs", type=int, default=8, help="distinct routings captured in the graph (>= 8)")
    p.add_argument("--replays", type=int, default=20, help="timed graph replays (default 20)")
    scaffold.add_iters(p, 50, "timed eager iterations")
    p.add_argument("--gemm", action="store_true", help="also the pipeline dispatch -> fake GEMM -> combine")
    scaffold.add_capacity(p, "every shape's engine")
    scaffold.add_fp8(p, "AllToAll(dispatch_dtype=)")
    p.add_argument(
        "--fp8-given",
        action="store_true",
        help="with --fp8: every shape also with rows quantized before the call (dispatch's x_scale=)",
    )
    scaffold.add_no_microbench(p, "use BENCHMARKS.md's B, B_hbm and L (labelled)")
    scaffold.add_switch(p, "--floor", "measure the machine's floor for each shape's bytes (default on)")
    common.add_num_sms_arg(p)
    scaffold.add_out(p, "bench_graph.json / .csv")
    args = p.parse_args(argv)
    scaffold.at_least(p, args, inputs=8)  # the graph must not replay one routing
    scaffold.shapes_and_counts(p, args, AB_SHAPES if args.shapes == "ab" else args.shapes)
    scaffold.check_capacity(p, args, max(shape.max_tokens for shape in args.shape_list), "a shape's T of")
    if args.fp8_given and not args.fp8:
        p.error("--fp8-given needs --fp8 FORMAT (the format the rows are quantized to)")
    return args


def graph_runs(args):
    """The runs: (shape, counts spec, fp8 format or None, rows quantized before the call), each spec of
    each shape with the token dtype, then with --fp8 fp8 dispatch, then with --fp8-given its rows given."""
    runs = []
    for shape, counts, fp8 in scaffold.shape_runs(args):
        runs.append((shape, counts, fp8, False))
        if fp8 and args.fp8_given:
            runs.append((shape, counts, fp8, True))
    return runs


def dispatch_label(fp8, given):
    """The dispatch column: the format, "given" where the rows were quantized before the call."""
    return f"{fp8} given" if given else fp8


class GivenFp8Pool:
    """An InputPool's entries with x quantized before the call, out of every timed region: (x fp8,
    topk_idx, topk_weights, x_scale), which dispatch sends as given. Routing and counts as the pool's."""

    def __init__(self, pool, fp8_dtype):
        from moe_a2a.reference import quantize_fp8

        self.counts = pool.counts
        self.routing = pool.routing
        self.items = []
        for x, idx, w in pool.items:
            q, scale = quantize_fp8(x, fp8_dtype)
            self.items.append((q, idx, w, scale))

    def __len__(self):
        return len(self.items)

    def get(self, i):
        return self.items[i % len(self.items)]


def row_label(shape_label, counts):
    """The label of a row in tables: the shape, plus the counts spec unless it is "max"."""
    return shape_label if counts in (None, "max") else f"{shape_label} {counts}"


def counts_cell(row):
    """The counts column: the spec, with the mean count per rank for "drawn"."""
    spec = row.get("counts", "max")
    if spec != "drawn":
        return spec
    return f"drawn ({'/'.join(fmt(t) for t in row['rank_tokens'])})"


def eager_us(ctx, system, pool, iters, flusher):
    """(dispatch us, combine us) per iteration, device events, max over ranks."""
    ep = system.ep
    d_us, c_us = [], []
    for i in range(iters + 5):
        inputs = pool.get(i)  # (x, topk_idx, topk_weights[, x_scale])
        common.before_timed_region(ctx, flusher)
        a, m, b = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        d = ep.dispatch(*inputs)
        m.record()
        ep.combine(system.passthrough(d), d)
        b.record()
        b.synchronize()
        if i >= 5:
            d_us.append(a.elapsed_time(m) * 1e3)
            c_us.append(m.elapsed_time(b) * 1e3)
    return common.max_over_ranks(ctx, d_us), common.max_over_ranks(ctx, c_us)


def bench_shape(ctx, shape, args, micro, flusher, fp8=None, counts="max", given=False):
    from baselines import MoeA2ASystem

    pool = common.InputPool(
        ctx, shape, args.inputs, num_tokens=common.spec_num_tokens(counts, ctx.world, shape.max_tokens)
    )
    fp8_dtype = common.FP8_DTYPES.get(fp8)
    routing = Routing(ctx, shape, pool, micro, dispatch_dtype=fp8_dtype)
    if given:
        pool = GivenFp8Pool(pool, fp8_dtype)
    system = MoeA2ASystem(
        ctx,
        shape,
        layout=args.layout,
        dispatch_dtype=fp8_dtype,
        num_sms=args.num_sms,
        send_sms=args.send_sms,
        capacity=args.capacity,
    )

    # Iterations per graph from the largest count any rank holds (pool.counts is gathered: the
    # same on every rank, so every rank captures the same sequence).
    largest = max(max(c) for c in pool.counts)
    per_graph = 8 * args.inputs if largest <= 256 else args.inputs
    row = {
        "shape": shape.label,
        "counts": counts,
        "label": row_label(shape.label, counts),
        "tokens": shape.max_tokens,  # the shape's max tokens per rank
        # per rank: its count (the mean over the pool entries for "drawn"), and entry 0's counts
        "rank_tokens": [sum(c[r] for c in pool.counts) / len(pool.counts) for r in range(ctx.world)]
        if counts == "drawn"
        else pool.counts[0],
        "rank_tokens_entry0": pool.counts[0],
        "tokens_mean": routing.tokens_per_rank,  # over ranks and entries
        "world": ctx.world,
        "layout": args.layout,
        "capacity": system.ep.max_num_tokens,  # the engine's: --capacity, or the shape's T
        "send_sms": list(getattr(system.ep, "send_sms", (0, 0))),  # a package from before send_sms: all do both
        "dispatch_dtype": dispatch_label(fp8, given) if fp8 else str(shape.dtype)[6:],
        "fp8_given": given,
        "sol_bound": routing.bound("dispatch+combine"),
        "inputs_in_graph": args.inputs,
    }
    g = graph_fields(
        common.time_graph(ctx, lambda i: system.dispatch_combine(pool.get(i)), args.inputs, per_graph, args.replays),
        routing,
        per_graph,
        "dispatch+combine",
    )
    row.update(g, sol_us=g["graph_sol_us"])  # with fp8 dispatch, of fp8 rows and scales (moe_a2a.sol)
    if args.gemm:
        p = summarize(common.time_graph(ctx, lambda i: system.run(pool.get(i)), args.inputs, per_graph, args.replays))
        row.update(graph_pipeline_us_median=p["median"], graph_pipeline_us_p10=p["p10"], graph_pipeline_us_p90=p["p90"])
    d_us, c_us = eager_us(ctx, system, pool, args.iters, flusher)
    for name, us in (("dispatch", d_us), ("combine", c_us)):
        s = summarize(us)
        row.update(
            {f"eager_{name}_us_median": s["median"], f"eager_{name}_us_p10": s["p10"], f"eager_{name}_us_p90": s["p90"]}
        )
    system.synchronize()
    system.close()
    floor = shape_floor(ctx, routing, args)
    if floor is not None:
        row.update(microbench.floor_fields(floor))
    if "floor_exchange_us" in row:
        row["graph_x_floor"] = row["graph_us_median"] / row["floor_exchange_us"]
    return row


def fp8_twins(rows):
    """(fp8 row, its token-dtype row) for every fp8 row, quantizing or given, in the order of graph_runs:
    a token-dtype row comes before its fp8 rows."""
    pairs, base = [], None
    for r in rows:
        if perf_report.is_fp8_row(r):
            pairs.append((r, base))
        else:
            base = r
    return pairs


def main():
    args = parse_args()
    ctx = common.init_benchmark()
    micro = get_micro(ctx, args)
    flusher = common.L2Flusher(ctx.device, preroll_us=1000.0)
    runs = graph_runs(args)
    save = scaffold.partial_saver(ctx, args, "bench_graph", micro=micro, one_gpu_proxy=ctx.one_gpu)

    def after(rows, new):
        save(rows, complete=False)
        r = new[0]
        print(
            f"{r['shape']:22s} {counts_cell(r):14s} {r['dispatch_dtype']:14s} graph d+c "
            f"{fmt(r['graph_us_median'])} us "
            f"({fmt(r['graph_us_p10'])}-{fmt(r['graph_us_p90'])}), "
            f"x SoL {fmt(r['graph_x_sol'], 2)} ({r['sol_bound']}), floor "
            f"{fmt(r.get('floor_exchange_us'))}; eager dispatch {fmt(r['eager_dispatch_us_median'])}, "
            f"combine {fmt(r['eager_combine_us_median'])}"
            + (f"; graph pipeline {fmt(r['graph_pipeline_us_median'])}" if args.gemm else ""),
            flush=True,
        )

    rows = scaffold.run_cases(
        ctx, runs, lambda run: [bench_shape(ctx, run[0], args, micro, flusher, run[2], run[1], run[3])], after=after
    )
    if ctx.rank == 0:
        if rows:
            print(
                f"moe_a2a blocks that only send (dispatch, combine): {rows[0]['send_sms']} "
                "(0: every block does both, -1: auto)"
            )
        heads = [
            "shape",
            "counts",
            "dispatch",
            "graph d+c us",
            "p10",
            "p90",
            "SoL d+c",
            "bound",
            "x SoL",
            "floor",
            "x floor",
        ]
        heads += ["graph pipeline"] if args.gemm else []
        heads += ["eager dispatch", "eager combine"]
        common.print_table(
            heads,
            [
                [
                    r["shape"],
                    counts_cell(r),
                    r["dispatch_dtype"],
                    fmt(r["graph_us_median"]),
                    fmt(r["graph_us_p10"]),
                    fmt(r["graph_us_p90"]),
                    fmt(r["sol_us"]),
                    r["sol_bound"],
                    fmt(r["graph_x_sol"], 2),
                    fmt(r.get("floor_exchange_us")),
                    fmt(r.get("graph_x_floor"), 2),
                ]
                + ([fmt(r["graph_pipeline_us_median"])] if args.gemm else [])
                + [fmt(r["eager_dispatch_us_median"]), fmt(r["eager_combine_us_median"])]
                for r in rows
            ],
        )
        if args.fp8:
            print(f"\nfp8 ({args.fp8}) dispatch / token-dtype dispatch, same run (eager device time; graph d+c):")
            for fp8_row, base in fp8_twins(rows):
                fp8_row["eager_dispatch_vs_token_dtype"] = (
                    fp8_row["eager_dispatch_us_median"] / base["eager_dispatch_us_median"]
                )
                fp8_row["graph_vs_token_dtype"] = fp8_row["graph_us_median"] / base["graph_us_median"]
                print(
                    f"  {base['label']:30s} {fp8_row['dispatch_dtype']:14s} dispatch "
                    f"x{fmt(fp8_row['eager_dispatch_vs_token_dtype'], 2)}, "
                    f"graph d+c x{fmt(fp8_row['graph_vs_token_dtype'], 2)}"
                )
        unequal = perf_report.unequal_lines(rows)
        if unequal:
            print("\nunequal per-rank counts: graph d+c next to the equal pair at the larger count (us):")
            print("\n".join(unequal))
        save(rows, complete=True)
    scaffold.finish()


if __name__ == "__main__":
    main()
