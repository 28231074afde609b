"""Dispatch and combine latency and bandwidth against tokens per rank, DeepSeek-V3 shape
(256 experts, top-8, hidden 7168, bf16), for moe_a2a and the NCCL path.

    torchrun --nproc-per-node=<N> benchmarks/bench_sweep.py [--tokens 1,2,4,...]

Every rank sends exactly T tokens (no random T) so the x axis means one thing. Eager device
time of dispatch, combine, dispatch -> combine and the pipeline with the fake grouped GEMM;
moe_a2a also in CUDA-graph steady state (dispatch -> combine and the pipeline; the NCCL path
cannot be captured: eager only), next to the machine's floor for each T's bytes. Same method
and options as bench_all2all.py.
"""

import common  # noqa: F401  (first: pins NVLink multicast off before torch.distributed loads)
import scaffold
import torch
from bench_all2all import (
    FLOOR_HEADERS,
    PHASE_ABBREV,
    Routing,
    add_case_args,
    add_common_args,
    bench_systems,
    check_common_args,
    floor_summary_rows,
    graph_cells,
    print_formulas,
    run,
)
from common import fmt

DEFAULT_TOKENS = ",".join(str(1 << i) for i in range(13))  # 1 .. 4096


def parse_args(argv=None):
    p = scaffold.parser(__doc__)
    p.add_argument("--tokens", default=DEFAULT_TOKENS, help="comma list of tokens per rank (default 1,2,4,...,4096)")
    p.add_argument("--shape", default="256,8,7168", help="experts,topk,hidden (default DeepSeek-V3: 256,8,7168)")
    add_case_args(p, "moe_a2a,nccl")
    scaffold.add_switch(p, "--check", "verify each system against moe_a2a.reference per token count")
    add_common_args(p)
    args = p.parse_args(argv)
    args.token_list = scaffold.ints(p, "--tokens", args.tokens)
    e, k, h = scaffold.sizes(p, "--shape", args.shape, ("experts", "topk", "hidden"))
    args.shape_list = [common.Shape(e, k, h, t, common.DTYPES[args.dtype], args.seed) for t in args.token_list]
    check_common_args(p, args)
    return args


def bench_tokens(ctx, shape, args, micro, flusher):
    t = shape.max_tokens
    pool = common.InputPool(ctx, shape, args.pool, num_tokens=t)
    routing = Routing(ctx, shape, pool, micro)
    check_inputs = None
    if args.check:
        check_inputs = [
            common.make_inputs(shape, r, ctx.world, common.pool_seed(shape, -1), ctx.device, num_tokens=t)
            for r in range(ctx.world)
        ]
    rows = bench_systems(
        ctx,
        shape,
        args,
        pool,
        routing,
        flusher,
        lambda name: {"shape": shape.label, "tokens": t, "world": ctx.world, "system": name, "tokens_per_rank": t},
        check_inputs,
    )
    del pool
    torch.cuda.empty_cache()
    return rows


def print_report(rows, micro):
    print()
    print_formulas(micro)
    heads = [
        "tokens",
        "system",
        "phase",
        "MB",
        "med us",
        "p10",
        "p90",
        "GB/s",
        "xSoL",
        "bound",
        "vsNCCL",
        "graph us",
        "g p10-p90",
        "g xSoL",
        "floor us",
        "check",
    ]
    lines = []
    for r in rows:
        phase = PHASE_ABBREV.get(r["phase"], r["phase"])
        if "us_median" not in r:
            lines.append([r["tokens"], r["system"], phase] + [""] * (len(heads) - 4) + [r["status"]])
        else:
            lines.append(
                [
                    r["tokens"],
                    r["system"],
                    phase,
                    fmt(r["bytes"] / 1e6, 3),
                    fmt(r["us_median"]),
                    fmt(r["us_p10"]),
                    fmt(r["us_p90"]),
                    fmt(r["GBps"]),
                    fmt(r["x_sol"], 2),
                    r.get("sol_bound", ""),
                    fmt(r.get("vs_nccl"), 2),
                ]
                + graph_cells(r)
                + [r["check"]]
            )
    common.print_table(heads, lines)
    fl = floor_summary_rows(rows)
    if fl:
        print("\nmoe_a2a in CUDA-graph steady state against the machine's floor (us per dispatch + combine):")
        common.print_table(FLOOR_HEADERS, fl)


def plot(rows, micro, path):
    plt = common.pyplot()
    if plt is None:
        return
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(14, 5))
    for s in dict.fromkeys(r["system"] for r in rows):
        for ph, style in (("dispatch", "-o"), ("combine", "--s")):
            pts = [
                (r["tokens"], r["us_median"], r["GBps"])
                for r in rows
                if r["system"] == s and r["phase"] == ph and "us_median" in r
            ]
            if pts:
                x, t, b = zip(*pts)
                ax_t.plot(x, t, style, label=f"{s} {ph}", markersize=4)
                ax_b.plot(x, b, style, label=f"{s} {ph}", markersize=4)
    for s in dict.fromkeys(r["system"] for r in rows if "graph_us_median" in r):
        pts = [
            (r["tokens"], r["graph_us_median"])
            for r in rows
            if r["system"] == s and r["phase"] == "dispatch+combine" and "graph_us_median" in r
        ]
        if pts:
            ax_t.plot(*zip(*pts), "-^", label=f"{s} dispatch+combine (graph)", markersize=4)
    sol = sorted({(r["tokens"], r["sol_us"]) for r in rows if "sol_us" in r and r["phase"] == "dispatch"})
    if sol:
        ax_t.plot(*zip(*sol), "k:", label="speed of light (dispatch)")
    fl = sorted({(r["tokens"], r["floor_exchange_us"]) for r in rows if "floor_exchange_us" in r})
    if fl:
        ax_t.plot(*zip(*fl), "r--", label="machine floor (2 phases)")
    ax_b.axhline(micro["B_GBps"], color="k", linestyle=":", label="B (peer store)")
    for ax, yl in ((ax_t, "median latency (us)"), (ax_b, "GB/s (busiest GPU)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens per rank")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_yscale("log")
    rows0 = rows[0] if rows else {}
    fig.suptitle(f"{rows0.get('shape', '').rsplit('-T', 1)[0]}, world {rows0.get('world')}")
    scaffold.save_figure(plt, fig, path)


def main(argv=None):
    args = parse_args(argv)
    run(args, "bench_sweep", bench_tokens, lambda ctx, shape: f"== tokens/rank {shape.max_tokens}", print_report, plot)


if __name__ == "__main__":
    main()
