"""Dispatch / combine / full-pipeline latency of every system on the challenge shapes.

    torchrun --nproc-per-node=<N> benchmarks/bench_all2all.py [options]

Per shape and system: device-event time of dispatch, combine and dispatch -> fake grouped
GEMM -> combine (max over ranks per iteration; median / p10 / p90 over iterations; fresh
inputs from a pool; L2 flushed), the bytes that must cross, GB/s, x speed of light (B and L
measured in this run) and x the NCCL baseline. World size comes from torchrun (2..8).
"""
import os
import sys

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):  # multicast off before torch.distributed loads
    os.environ.setdefault(_k, _v)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402

import common  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from common import fmt, summarize  # noqa: E402
import sol_local  # noqa: E402

ALL_SYSTEMS = ["reference", "nccl", "symm_mem", "moe_a2a"]
PHASES = ("dispatch", "combine", "pipeline")
MIN_ITERS = 50  # BENCHMARKS.md: median over >= 50 iterations


def add_common_args(p, default_iters=MIN_ITERS):
    p.add_argument("--iters", type=int, default=default_iters,
                   help=f"timed iterations per measurement (default {default_iters}, >= {MIN_ITERS})")
    p.add_argument("--warmup", type=int, default=10, help="untimed iterations first (default 10)")
    p.add_argument("--pool", type=int, default=16,
                   help="distinct pre-generated inputs cycled through (default 16)")
    p.add_argument("--out", default=os.path.join(common.BENCH_DIR, "results"),
                   help="folder for JSON, CSV and PNG (default benchmarks/results/)")
    p.add_argument("--flush-mib", type=int, default=256,
                   help="L2 flush buffer written before every timed iteration (default 256)")
    p.add_argument("--preroll-us", type=float, default=1000.0,
                   help="GPU busy-wait before each start event so the host queues the timed\n"
                        "calls ahead: device time excludes host launch overhead (default\n"
                        "1000; 0 = off, the host's launch gaps then count)")
    p.add_argument("--no-microbench", action="store_true",
                   help="skip measuring B and L; use BENCHMARKS.md's 2 x H200 values (labelled)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shapes", default=common.CHALLENGE_SHAPES,
                   help='"E,K,H,T[,dtype[,seed]];..." (default: the 5 challenge shapes)')
    p.add_argument("--dtype", default="bf16", choices=sorted(common.DTYPES),
                   help="token dtype where a shape names none (default bf16)")
    p.add_argument("--seed", type=int, default=0, help="seed where a shape names none")
    p.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                   help=f"comma list from {ALL_SYSTEMS} (default all)")
    add_common_args(p)
    p.add_argument("--harness", action="store_true",
                   help="also time the challenge harness (rank-0 wall clock between barriers,\n"
                        "inputs cloned inside) and its floor (a function that only clones)")
    p.add_argument("--trace", metavar="PATH",
                   help="write an in-kernel profiler trace of one moe_a2a iteration per shape to\n"
                        "PATH-<shape>.json and print the profiler's overhead (needs a build\n"
                        "with MOE_A2A_PROFILE=1)")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="verify each system against moe_a2a.reference once per shape (default on)")
    args = p.parse_args(argv)
    args.shape_list = common.parse_shapes(args.shapes, args.dtype, args.seed)
    args.system_list = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = [s for s in args.system_list if s not in ALL_SYSTEMS]
    if bad:
        p.error(f"unknown systems {bad}; choose from {ALL_SYSTEMS}")
    if args.iters < MIN_ITERS:
        p.error(f"--iters must be >= {MIN_ITERS} (BENCHMARKS.md)")
    if args.pool < 1 or args.warmup < 0:
        p.error("--pool >= 1 and --warmup >= 0")
    return args


# ----------------------------------------------------------------------------- measuring
class Routing:
    """Bytes that must cross and the speed of light (one phase) of each pool entry:
    moe_a2a.sol when it imports, else sol_local.py (same formula)."""

    def __init__(self, ctx, shape, pool, micro):
        elem = torch.tensor([], dtype=shape.dtype).element_size()
        self.token_bytes = shape.hidden * elem
        sol = common.moe_submodule("sol")
        self.sol_model = "moe_a2a.sol" if sol is not None else "benchmarks/sol_local.py"
        self.busiest, self.total, self.pairs, self.sol = [], [], [], []
        B, L = micro["B_GBps"], micro["L_us"]
        for j in range(len(pool)):
            m, p = sol_local.traffic_matrix(pool.routing(j), ctx.world, shape.experts)
            b = sol_local.busiest_rank_tokens(m) * self.token_bytes
            if sol is not None:
                d, _ = sol.phase_bytes(pool.routing(j), shape.experts, ctx.world, shape.hidden,
                                       shape.dtype)
                self.sol.append(sol.sol_time_us(d.bytes_out, d.bytes_in, B, B, L))
            else:
                self.sol.append(sol_local.sol_us(b, B, L))
            self.busiest.append(b)
            self.total.append(sol_local.total_tokens(m) * self.token_bytes)
            self.pairs.append(sol_local.total_tokens(p) * self.token_bytes)
        self.tokens_per_rank = sum(float(it[0].shape[0]) for it in pool.items) / len(pool)
        # (every rank has its own T; this rank's mean stands in, gathered for the table)
        t = torch.tensor([self.tokens_per_rank], device=ctx.device)
        dist.all_reduce(t, group=ctx.group)
        self.tokens_per_rank = t.item() / ctx.world


def phase_row(us, routing, warmup, phase):
    """Statistics of one measurement; per-iteration ratios use that iteration's pool entry."""
    n = len(routing.sol)
    scale = 2 if phase == "pipeline" else 1  # the pipeline crosses twice (dispatch + combine)
    entry = [(j + warmup) % n for j in range(len(us))]
    gbps = [scale * routing.busiest[e] / (t * 1e3) for t, e in zip(us, entry)]
    xsol = [t / (scale * routing.sol[e]) for t, e in zip(us, entry)]
    s = summarize(us)
    return {"us_median": s["median"], "us_p10": s["p10"], "us_p90": s["p90"],
            "GBps": summarize(gbps)["median"], "x_sol": summarize(xsol)["median"],
            "sol_us": scale * summarize(routing.sol)["median"],
            "bytes": scale * summarize(routing.busiest)["median"],
            "bytes_total": scale * summarize(routing.total)["median"],
            "bytes_pairs": scale * summarize(routing.pairs)["median"]}


def measure(ctx, system, pool, args, flusher, phases=PHASES):
    """{phase: per-iteration us} for one system."""
    out = {}

    def finish(d):  # untimed: every dispatch is combined before the next one
        system.combine(system.fake_gemm(d), d)

    if "dispatch" in phases:
        out["dispatch"] = common.time_device(ctx, system.dispatch, args.iters, args.warmup,
                                             prepare=pool.get, flusher=flusher, after=finish)
    if "combine" in phases:
        def prep(i):  # dispatch and fake GEMM untimed, so only combine is inside the events
            d = system.dispatch(pool.get(i))
            return system.fake_gemm(d), d
        out["combine"] = common.time_device(ctx, lambda a: system.combine(*a), args.iters,
                                            args.warmup, prepare=prep, flusher=flusher)
    if "pipeline" in phases:
        out["pipeline"] = common.time_device(ctx, system.run, args.iters, args.warmup,
                                             prepare=pool.get, flusher=flusher)
    system.synchronize()  # moe_a2a raises here on device-reported errors
    return out


def get_micro(ctx, args):
    if args.no_microbench:
        import microbench
        a = microbench.ASSUMED
        return {"B_GBps": a["B_GBps"], "flag_latency_us": a["flag_latency_us"], "B_local_GBps": a["B_local_GBps"],
                "B_local_source": "assumed: " + a["source"],
                "L_us": a["flag_latency_us"], "B_source": "assumed: " + a["source"],
                "flag_source": "assumed (no launch cost added): " + a["source"]}
    import microbench
    m = microbench.run(ctx)
    if ctx.rank == 0:
        microbench.print_summary(m)
    return m


def write_trace(ctx, shape, pool, path, args, flusher):
    """A trace of one profiled moe_a2a pipeline iteration (moe_a2a.trace.save), and the
    profiler's overhead: pipeline time with profiling on vs the same build with it off
    (profile=False; a default build compiles the instrumentation out entirely)."""
    mod, _ = common.import_moe_a2a()
    trace = common.moe_submodule("trace")
    if not common.has_extension(mod) or trace is None:
        if ctx.rank == 0:
            print("trace: moe_a2a extension or moe_a2a.trace not available; skipped")
        return
    from moe_a2a._ext import ext
    if not ext().profiler_compiled_in():
        if ctx.rank == 0:
            print("trace: this moe_a2a build has no profiler (rebuild with MOE_A2A_PROFILE=1); skipped")
        return
    from baselines import MoeA2ASystem
    med = {}
    for profile in (False, True):
        system = MoeA2ASystem(ctx, shape, profile=profile)

        def prep(i, system=system, profile=profile):
            if profile:  # untimed: keeps every timed iteration's records inside the buffers
                system.ep.profile_reset()
            return pool.get(i)

        us = common.time_device(ctx, system.run, args.iters, args.warmup, prepare=prep, flusher=flusher)
        med[profile] = summarize(us)["median"]
        if not profile:
            system.close()
    if ctx.rank == 0:
        off, on = med[False], med[True]
        print(f"trace overhead {shape.label}: pipeline median {on:.1f} us profiled vs {off:.1f} us not "
              f"profiled (same build): {on - off:+.1f} us ({100 * (on - off) / off:+.1f}%)")
    system.ep.profile_reset()
    system.run(pool.get(0))
    system.synchronize()
    root, ext_ = os.path.splitext(path)
    target = f"{root}-{shape.label}{ext_ or '.json'}"
    tr = trace.save(target, system.ep)
    if ctx.rank == 0:
        info = tr["moe_a2a"]
        print(f"trace: wrote {target} ({len(tr['traceEvents'])} events, clock alignment error <= "
              f"{info['clock_alignment_error_us']:.2f} us, dropped records {info['dropped_records']})")
    system.close()


# ----------------------------------------------------------------------------- one shape
def bench_shape(ctx, shape, args, micro, flusher):
    from baselines import build
    pool = common.InputPool(ctx, shape, args.pool)
    routing = Routing(ctx, shape, pool, micro)
    base = {"shape": shape.label, "experts": shape.experts, "topk": shape.topk,
            "hidden": shape.hidden, "max_tokens": shape.max_tokens,
            "dtype": common.DTYPE_NAMES[shape.dtype], "world": ctx.world,
            "tokens_per_rank": routing.tokens_per_rank, "sol_model": routing.sol_model}
    check_inputs = None
    if args.check:
        check_inputs = [common.make_inputs(shape, r, ctx.world, common.pool_seed(shape, -1),
                                           ctx.device) for r in range(ctx.world)]
    floor = None
    if args.harness:  # a submission that does no communication at all
        floor = summarize(common.time_harness(ctx, lambda inp: inp[0].clone(), pool.get,
                                              args.iters, args.warmup))["median"]
    rows = []
    for name in args.system_list:
        system, why = build(name, ctx, shape)
        info = dict(base, system=name)
        if system is None:
            rows += [dict(info, phase=ph, status=why) for ph in PHASES]
            continue
        status, check = "ok", "-"
        try:
            if check_inputs is not None:
                ok, err = system.check(check_inputs)
                check = f"pass ({err:.1e})" if ok else f"FAIL ({err:.1e})"
                status = "ok" if ok else "wrong result"
            times = measure(ctx, system, pool, args, flusher)
            harness = None
            if args.harness:
                harness = summarize(common.time_harness(ctx, system.run, pool.get,
                                                        args.iters, args.warmup))["median"]
        except Exception as e:  # report and go on; a hang is not caught here
            rows += [dict(info, phase=ph, status=f"error: {type(e).__name__}: {e}") for ph in PHASES]
            system.close()
            continue
        for ph in PHASES:
            r = dict(info, phase=ph, status=status, check=check, note=system.note,
                     **phase_row(times[ph], routing, args.warmup, ph))
            if harness is not None and ph == "pipeline":
                r.update(harness_us=harness, floor_us=floor, above_floor_us=harness - floor)
            rows.append(r)
        system.close()
    add_vs_nccl(rows)
    if args.trace:
        write_trace(ctx, shape, pool, args.trace, args, flusher)
    del pool
    torch.cuda.empty_cache()
    return rows


def add_vs_nccl(rows):
    """vs_nccl = NCCL time / this time: > 1 means faster than the NCCL baseline."""
    nccl = {(r["shape"], r["phase"]): r["us_median"] for r in rows
            if r["system"] == "nccl" and "us_median" in r}
    for r in rows:
        ref = nccl.get((r["shape"], r["phase"]))
        if ref and "us_median" in r:
            r["vs_nccl"] = ref / r["us_median"]


# ----------------------------------------------------------------------------- report
HEADERS = ["shape", "system", "phase", "tok/rank", "MB", "med us", "p10", "p90", "GB/s",
           "xSoL", "SoL us", "vsNCCL", "check"]


def table_rows(rows, harness=False):
    out = []
    for r in rows:
        if "us_median" not in r:
            line = [r["shape"], r["system"], r["phase"], fmt(r.get("tokens_per_rank"))]
            out.append(line + [""] * (len(HEADERS) - 5) + [r["status"]]
                       + ([""] * 3 if harness else []))
            continue
        line = [r["shape"], r["system"], r["phase"], fmt(r["tokens_per_rank"]),
                fmt(r["bytes"] / 1e6, 2), fmt(r["us_median"]), fmt(r["us_p10"]),
                fmt(r["us_p90"]), fmt(r["GBps"]), fmt(r["x_sol"], 2), fmt(r["sol_us"]),
                fmt(r.get("vs_nccl"), 2), r["check"] if r["status"] == "ok" else r["status"]]
        if harness:
            line += [fmt(r.get("harness_us")), fmt(r.get("floor_us")), fmt(r.get("above_floor_us"))]
        out.append(line)
    return out


def print_report(rows, micro, harness):
    print()
    print("bytes = busiest GPU's max(sent, received): " + sol_local.FORMULA)
    print(f"B = {micro['B_GBps']:.0f} GB/s ({micro['B_source']}), L = {micro['L_us']:.2f} us; "
          "xSoL = time / SoL (1 = physical limit); vsNCCL = NCCL time / time (>1 = faster)")
    heads = HEADERS + (["harness us", "floor us", "above floor"] if harness else [])
    common.print_table(heads, table_rows(rows, harness))
    print("\ngeomean of the pipeline median (us) over the shapes both it and nccl ran:")
    med = {(r["system"], r["shape"]): r["us_median"] for r in rows
           if r["phase"] == "pipeline" and "us_median" in r}
    for x in dict.fromkeys(r["system"] for r in rows):
        shapes = [s for (y, s) in med if y == x and ("nccl", s) in med]
        if shapes:
            g, gn = (common.geomean([med[(y, s)] for s in shapes]) for y in (x, "nccl"))
            print(f"  {x:10s} {fmt(g):>10s}   nccl {fmt(gn):>10s}   vsNCCL {fmt(gn / g, 2)}"
                  f"   ({len(shapes)} shapes)")


def plot(rows, path):
    plt = common.pyplot()
    if plt is None:
        return
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(18, 5), sharey=True)
    width = 0.8 / max(len(systems), 1)
    for ax, ph in zip(axes, PHASES):
        for k, s in enumerate(systems):
            xs, ys = [], []
            for i, sh in enumerate(shapes):
                r = next((r for r in rows if r["shape"] == sh and r["system"] == s
                          and r["phase"] == ph and "us_median" in r), None)
                if r:
                    xs.append(i - 0.4 + width * (k + 0.5))
                    ys.append(r["us_median"])
            ax.bar(xs, ys, width, label=s)
        for i, sh in enumerate(shapes):  # speed of light: a black bar across the group
            sol = next((r["sol_us"] for r in rows if r["shape"] == sh and r["phase"] == ph
                        and "sol_us" in r), None)
            if sol:
                ax.hlines(sol, i - 0.45, i + 0.45, colors="k", linewidth=2,
                          label="speed of light" if i == 0 else None)
        ax.set_yscale("log")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=30, ha="right", fontsize=8)
        ax.set_title(ph)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("median latency (us), max over ranks")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def write_outputs(ctx, args, name, rows, micro, extra=None):
    if ctx.rank != 0:
        return
    os.makedirs(args.out, exist_ok=True)
    cfg = {k: v for k, v in vars(args).items() if k not in ("shape_list",)}
    doc = {"meta": common.metadata(ctx), "config": cfg, "microbench": micro,
           "formula": sol_local.FORMULA, "rows": rows}
    doc.update(extra or {})
    common.write_json(os.path.join(args.out, f"{name}.json"), doc)
    common.write_csv(os.path.join(args.out, f"{name}.csv"), rows)
    print(f"wrote {os.path.join(args.out, name)}.json/.csv")


def main(argv=None):
    args = parse_args(argv)
    ctx = common.init_distributed()
    micro = get_micro(ctx, args)
    flusher = common.L2Flusher(ctx.device, args.flush_mib * common.MiB, args.preroll_us)
    rows = []
    for shape in args.shape_list:
        if ctx.rank == 0:
            print(f"== {shape.label} {common.DTYPE_NAMES[shape.dtype]} seed {shape.seed}, "
                  f"world {ctx.world}", flush=True)
        rows += bench_shape(ctx, shape, args, micro, flusher)
    if ctx.rank == 0:
        print_report(rows, micro, args.harness)
        plot(rows, os.path.join(args.out, "bench_all2all.png"))
    write_outputs(ctx, args, "bench_all2all", rows, micro)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
