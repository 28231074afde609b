"""Dispatch / combine / full-pipeline latency of every system on the challenge shapes.

    torchrun --nproc-per-node=<N> benchmarks/bench_all2all.py [options]

Per shape and system, eager: device-event time of dispatch, combine, dispatch -> combine
(no GEMM) and dispatch -> fake grouped GEMM -> combine (max over ranks per iteration; median /
p10 / p90 over iterations; fresh inputs from a pool; L2 flushed). CUDA-graph steady state
(moe_a2a only; the NCCL path syncs the host for its split sizes and cannot be captured):
dispatch -> combine and the pipeline, N iterations over >= 8 routings in one graph, per
iteration = replay time / N, max over ranks, median / p10 / p90 over replays. Also the bytes
that must cross, GB/s, x speed of light (moe_a2a.sol: link and local-memory terms, B, B_hbm
and L measured in this run), the machine's floor for the shape's bytes (a bare exchange,
one kernel per phase) and x the NCCL baseline. World size comes from torchrun (2..8).
"""

import os

import common  # noqa: F401  (first: pins NVLink multicast off before torch.distributed loads)
import microbench
import scaffold
import torch
import torch.distributed as dist
from common import fmt, summarize

ALL_SYSTEMS = ["reference", "nccl", "symm_mem", "moe_a2a"]
PHASES = ("dispatch", "combine", "dispatch+combine", "pipeline")
GRAPH_PHASES = ("dispatch+combine", "pipeline")  # what a graph can hold: every dispatch combined
TWO_PHASE = ("dispatch+combine", "pipeline")  # cross the links twice
MIN_ITERS = 50  # BENCHMARKS.md: median over >= 50 iterations
MIN_GRAPH_INPUTS = 8  # BENCHMARKS.md: >= 8 different routings in one graph


def add_common_args(p, default_iters=MIN_ITERS):
    """The timing, graph and floor options of bench_all2all.py and bench_sweep.py."""
    scaffold.add_iters(p, default_iters, f"timed iterations per measurement (>= {MIN_ITERS})")
    scaffold.add_warmup(p, 10)
    p.add_argument("--pool", type=int, default=16, help="distinct pre-generated inputs cycled through (default 16)")
    scaffold.add_out(p)
    common.add_device_timing_args(p, 1000.0, "default 1000")
    common.add_num_sms_arg(p)
    scaffold.add_no_microbench(p)
    scaffold.add_layout(p, "padded")
    scaffold.add_switch(p, "--graph", "also time moe_a2a in CUDA-graph steady state (default on)")
    p.add_argument(
        "--graph-iters",
        type=int,
        default=0,
        help="iterations captured in one graph (default 0 = auto: 64 up to 256 tokens\n"
        "per rank, else 16); they cycle through the whole pool",
    )
    p.add_argument("--graph-replays", type=int, default=20, help="timed graph replays (default 20)")
    scaffold.add_switch(
        p,
        "--floor",
        "measure the machine's floor (bare exchange) for each shape's bytes and the\n"
        "floor table in the microbenchmarks (default on; needs the extension)",
    )


def add_case_args(p, systems_default):
    """--dtype, --seed and --systems of bench_all2all.py and bench_sweep.py."""
    p.add_argument(
        "--dtype",
        default="bf16",
        choices=sorted(common.DTYPES),
        help="token dtype where a shape names none (default bf16)",
    )
    scaffold.add_seed(p, "seed where a shape names none")
    p.add_argument(
        "--systems",
        default=systems_default,
        help=f"comma list from {ALL_SYSTEMS} (default {systems_default})",
    )


def parse_args(argv=None):
    p = scaffold.parser(__doc__)
    p.add_argument(
        "--shapes",
        default=common.CHALLENGE_SHAPES,
        help='"E,K,H,T[,dtype[,seed]];..." (default: the 5 challenge shapes)',
    )
    add_case_args(p, ",".join(ALL_SYSTEMS))
    add_common_args(p)
    p.add_argument(
        "--harness",
        action="store_true",
        help="also time the challenge harness (rank-0 wall clock between barriers,\n"
        "inputs cloned inside) and its floor (a function that only clones)",
    )
    p.add_argument(
        "--trace",
        metavar="PATH",
        help="write an in-kernel profiler trace of one moe_a2a iteration per shape to\n"
        "PATH-<shape>.json and print the profiler's overhead (needs a build\n"
        "with MOE_A2A_PROFILE=1)",
    )
    p.add_argument(
        "--trace-graph",
        type=int,
        default=0,
        metavar="N",
        help="with --trace: trace N iterations of dispatch + combine replayed from a CUDA graph\n"
        "(steady state, as bench_graph.py times it) instead of one eager pipeline iteration",
    )
    p.add_argument(
        "--trace-fp8",
        choices=sorted(common.FP8_DTYPES),
        default=None,
        help="with --trace: trace moe_a2a with fp8 dispatch in this format (AllToAll(dispatch_dtype=))",
    )
    p.add_argument(
        "--max-counts",
        action="store_true",
        help="every rank holds the shape's max tokens (bench_graph.py --counts max); default: each rank's\n"
        "count drawn uniformly in 1..max per input, as the challenge draws them",
    )
    scaffold.add_switch(p, "--check", "verify each system against moe_a2a.reference once per shape (default on)")
    args = p.parse_args(argv)
    args.shape_list = common.parse_shapes(args.shapes, args.dtype, args.seed)
    check_common_args(p, args)
    return args


def check_common_args(p, args):
    """The checks of add_common_args' options and --systems (sets args.system_list)."""
    args.system_list = scaffold.names(p, "--systems", args.systems, ALL_SYSTEMS)
    scaffold.at_least(p, args, iters=MIN_ITERS, pool=1, warmup=0, graph_iters=0, graph_replays=1)
    if args.graph and args.pool < MIN_GRAPH_INPUTS:
        p.error(f"--graph needs --pool >= {MIN_GRAPH_INPUTS} (the graph must not replay one routing)")


def graph_iters(args, tokens):
    """Iterations captured per graph: --graph-iters, or 64 up to 256 tokens per rank, else 16."""
    return args.graph_iters or (64 if tokens <= 256 else 16)


# ----------------------------------------------------------------------------- measuring
class Routing:
    """Per pool entry: the bytes that must cross (busiest GPU, each phase), the local-memory
    bytes, and the speed of light of each phase from moe_a2a.sol.bounds (the larger of the link
    and local terms, plus L) and which term bound it. With dispatch_dtype (fp8) dispatch moves
    fp8 rows and their scales (moe_a2a.sol.fp8_row_bytes), combine token-dtype rows."""

    def __init__(self, ctx, shape, pool, micro, dispatch_dtype=None):
        sol = common.sol_model()
        self.sol_model = "moe_a2a.sol.bounds"
        # bytes of a row of each phase (bytes_total / bytes_pairs count rows of both)
        dispatch_row, combine_row = sol.row_bytes(shape.hidden, shape.dtype, dispatch_dtype)
        self.row_bytes = {"dispatch": dispatch_row, "combine": combine_row}
        self.busiest_d, self.busiest_c, self.total, self.pairs = [], [], [], []
        self.sol_d, self.sol_c, self.bound_d, self.bound_c = [], [], [], []
        self.local_d, self.local_c = [], []
        B, B_hbm, L = micro["B_GBps"], micro["B_hbm_GBps"], micro["L_us"]
        for j in range(len(pool)):
            routing = pool.routing(j)
            d, c = sol.bounds(routing, shape.experts, ctx.world, shape.hidden, shape.dtype, B, B_hbm, L, dispatch_dtype)
            self.busiest_d.append(d.link_bytes)
            self.busiest_c.append(c.link_bytes)
            self.sol_d.append(d.us)
            self.sol_c.append(c.us)
            self.bound_d.append(d.bound)
            self.bound_c.append(c.bound)
            self.local_d.append(d.local_bytes)
            self.local_c.append(c.local_bytes)
            self.total.append(sol.traffic_matrix(routing, shape.experts, ctx.world).sum().item())  # rows
            self.pairs.append(sol.pairs_matrix(routing, shape.experts, ctx.world).sum().item())
        self.tokens_per_rank = sum(float(it[0].shape[0]) for it in pool.items) / len(pool)
        # (every rank has its own T; this rank's mean stands in, gathered for the table)
        t = torch.tensor([self.tokens_per_rank], device=ctx.device)
        dist.all_reduce(t, group=ctx.group)
        self.tokens_per_rank = t.item() / ctx.world

    def _of_phase(self, phase, j, dispatch, combine):
        """Pool entry j's value of `phase` from per-entry dispatch and combine lists (two-phase
        rows: the sum)."""
        j %= len(self)
        if phase == "dispatch":
            return dispatch[j]
        if phase == "combine":
            return combine[j]
        return dispatch[j] + combine[j]

    def moved(self, phase, j):
        """Busiest GPU's bytes over the links in `phase` on pool entry j."""
        return self._of_phase(phase, j, self.busiest_d, self.busiest_c)

    def rows_bytes(self, phase, rows):
        """`rows` rows crossing in `phase` (in each phase of a two-phase row), in bytes."""
        if phase in ("dispatch", "combine"):
            return rows * self.row_bytes[phase]
        return rows * (self.row_bytes["dispatch"] + self.row_bytes["combine"])

    def __len__(self):
        return len(self.sol_d)

    def sol(self, phase, j):
        """Speed of light in us of `phase` on pool entry j."""
        return self._of_phase(phase, j, self.sol_d, self.sol_c)

    def bound(self, phase):
        """The term that bound the SoL on most entries: link or local (dispatch/combine when the
        two phases of a two-phase row differ)."""

        def most(words):
            return max(dict.fromkeys(words), key=words.count)

        if phase == "dispatch":
            return most(self.bound_d)
        if phase == "combine":
            return most(self.bound_c)
        bd, bc = most(self.bound_d), most(self.bound_c)
        return bd if bd == bc else f"{bd}/{bc}"

    def local_bytes(self, phase):
        if phase == "dispatch":
            return summarize(self.local_d)["median"]
        if phase == "combine":
            return summarize(self.local_c)["median"]
        return summarize([a + b for a, b in zip(self.local_d, self.local_c)])["median"]

    def phase_bytes(self):
        """Busiest GPU's bytes of one phase, median over the pool: what the floor moves
        (microbench.floor_bytes)."""
        return microbench.floor_bytes(self.busiest_d, self.busiest_c)


def phase_row(us, routing, warmup, phase):
    """Statistics of one eager measurement; per-iteration ratios use that iteration's pool entry
    (iteration j of the timed loop ran entry j + warmup)."""
    n = len(routing)
    entry = [(j + warmup) % n for j in range(len(us))]
    gbps = [routing.moved(phase, e) / (t * 1e3) for t, e in zip(us, entry)]
    xsol = [t / routing.sol(phase, e) for t, e in zip(us, entry)]
    s = summarize(us)
    return {
        "us_median": s["median"],
        "us_p10": s["p10"],
        "us_p90": s["p90"],
        "GBps": summarize(gbps)["median"],
        "x_sol": summarize(xsol)["median"],
        "sol_us": summarize([routing.sol(phase, j) for j in range(n)])["median"],
        "sol_bound": routing.bound(phase),
        "local_bytes": routing.local_bytes(phase),
        "bytes": summarize([routing.moved(phase, j) for j in range(n)])["median"],
        "bytes_total": routing.rows_bytes(phase, summarize(routing.total)["median"]),
        "bytes_pairs": routing.rows_bytes(phase, summarize(routing.pairs)["median"]),
    }


def graph_fields(us, routing, iters, phase):
    """Statistics of one graph measurement: a replay ran entries 0..iters-1 (mod the pool), so
    its per-iteration time compares with the mean SoL and bytes over those entries."""
    sol_mean = sum(routing.sol(phase, i) for i in range(iters)) / iters
    bytes_mean = sum(routing.moved(phase, i) for i in range(iters)) / iters
    s = summarize(us)
    return {
        "graph_us_median": s["median"],
        "graph_us_p10": s["p10"],
        "graph_us_p90": s["p90"],
        "graph_sol_us": sol_mean,
        "graph_x_sol": s["median"] / sol_mean,
        "graph_GBps": bytes_mean / (s["median"] * 1e3),
        "graph_iters": iters,
        "graph_replays": s["n"],
    }


def measure(ctx, system, pool, args, flusher, phases=PHASES):
    """{phase: per-iteration us} for one system, eager (device events per call)."""
    out = {}

    def finish(d):  # untimed: every dispatch is combined before the next one
        system.combine(system.fake_gemm(d), d)

    if "dispatch" in phases:
        out["dispatch"] = common.time_device(
            ctx, system.dispatch, args.iters, args.warmup, prepare=pool.get, flusher=flusher, after=finish
        )
    if "combine" in phases:

        def prep(i):  # dispatch and fake GEMM untimed, so only combine is inside the events
            d = system.dispatch(pool.get(i))
            return system.fake_gemm(d), d

        out["combine"] = common.time_device(
            ctx, lambda a: system.combine(*a), args.iters, args.warmup, prepare=prep, flusher=flusher
        )
    if "dispatch+combine" in phases:
        out["dispatch+combine"] = common.time_device(
            ctx, system.dispatch_combine, args.iters, args.warmup, prepare=pool.get, flusher=flusher
        )
    if "pipeline" in phases:
        out["pipeline"] = common.time_device(
            ctx, system.run, args.iters, args.warmup, prepare=pool.get, flusher=flusher
        )
    system.synchronize()  # moe_a2a raises here on device-reported errors
    return out


def measure_graph(ctx, system, pool, args, tokens, phases=GRAPH_PHASES):
    """{phase: per-iteration us per replay} in CUDA-graph steady state (common.time_graph),
    for a system that can be captured; {} otherwise or with --no-graph."""
    if not (args.graph and system.graph_capturable):
        return {}
    iters = graph_iters(args, tokens)
    steps = {
        "dispatch+combine": lambda i: system.dispatch_combine(pool.get(i)),
        "pipeline": lambda i: system.run(pool.get(i)),
    }
    out = {ph: common.time_graph(ctx, steps[ph], len(pool), iters, args.graph_replays) for ph in phases if ph in steps}
    system.synchronize()
    return out


def measure_graph_or_error(ctx, system, pool, args, tokens):
    """measure_graph, or {"error": message} when capture or replay raised (the eager numbers of
    the system are kept; the graph columns then show the error)."""
    try:
        return measure_graph(ctx, system, pool, args, tokens)
    except Exception as e:
        torch.cuda.synchronize()
        return {"error": common.error_status(e, f"{system.name} in a CUDA graph")}


def shape_floor(ctx, routing, args):
    """The machine's floor for this shape's bytes (benchmarks/microbench.floor_for_bytes), or None."""
    if not args.floor:
        return None
    # The floor uses no more blocks than moe_a2a was given.
    blocks = tuple(min(b, args.num_sms or b) for b in microbench.FLOOR_BLOCKS)
    return microbench.floor_for_bytes(ctx, routing.phase_bytes(), blocks=blocks)


def get_micro(ctx, args):
    """B, B_hbm and L for the speed of light (and the floor table unless --no-floor), measured
    in this run by microbench.run, or BENCHMARKS.md's values with --no-microbench (labelled)."""
    if args.no_microbench:
        a = microbench.ASSUMED
        return {
            "B_GBps": a["B_GBps"],
            "flag_latency_us": a["flag_latency_us"],
            "B_hbm_GBps": a["B_hbm_GBps"],
            "B_hbm_source": "assumed: " + a["source"],
            "L_us": a["flag_latency_us"],
            "B_source": "assumed: " + a["source"],
            "flag_source": "assumed (no launch cost added): " + a["source"],
        }
    m = microbench.run(ctx, floor=getattr(args, "floor", True))
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

    kw = dict(layout=args.layout, num_sms=args.num_sms, send_sms=args.send_sms)
    if args.trace_fp8:
        kw["dispatch_dtype"] = common.FP8_DTYPES[args.trace_fp8]
    label = shape.label + (f"-{args.trace_fp8}" if args.trace_fp8 else "")
    if args.trace_graph > 0:
        system = MoeA2ASystem(ctx, shape, profile=True, **kw)
        graph = common.capture_steps(lambda i: system.dispatch_combine(pool.get(i)), args.pool, args.trace_graph)
        graph.replay()  # warm: the records of the replay below are steady state
        system.ep.profile_reset()
        ctx.align()
        graph.replay()
        system.synchronize()
        save_trace(ctx, trace, system.ep, path, f"{label}-graph{args.trace_graph}")
        del graph
        system.close()
        return
    med = {}
    for profile in (False, True):
        system = MoeA2ASystem(ctx, shape, profile=profile, **kw)

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
        print(
            f"trace overhead {shape.label}: pipeline median {on:.1f} us profiled vs {off:.1f} us not "
            f"profiled (same build): {on - off:+.1f} us ({100 * (on - off) / off:+.1f}%)"
        )
    system.ep.profile_reset()
    system.run(pool.get(0))
    system.synchronize()
    save_trace(ctx, trace, system.ep, path, label)
    system.close()


def save_trace(ctx, trace, ep, path, label):
    """Collective: ep's records to PATH-<label>.json (moe_a2a.trace.save), reported on rank 0."""
    root, ext_ = os.path.splitext(path)
    target = f"{root}-{label}{ext_ or '.json'}"
    tr = trace.save(target, ep)
    if ctx.rank == 0:
        info = tr["moe_a2a"]
        print(
            f"trace: wrote {target} ({len(tr['traceEvents'])} events, clock alignment error <= "
            f"{info['clock_alignment_error_us']:.2f} us, dropped records {info['dropped_records']})"
        )


# ----------------------------------------------------------------------------- one shape
def build_system(name, ctx, shape, args):
    from baselines import build

    return build(
        name,
        ctx,
        shape,
        **({"layout": args.layout, "num_sms": args.num_sms, "send_sms": args.send_sms} if name == "moe_a2a" else {}),
    )


def system_rows(info, system, times, gtimes, routing, args, tokens, check, status):
    """One row per phase: eager statistics, plus the graph statistics where measured."""
    rows = []
    for ph in PHASES:
        if ph not in times:
            continue
        r = dict(
            info,
            phase=ph,
            status=status,
            check=check,
            note=system.note,
            **phase_row(times[ph], routing, args.warmup, ph),
        )
        if ph in gtimes:
            r.update(graph_fields(gtimes[ph], routing, graph_iters(args, tokens), ph))
        elif ph in GRAPH_PHASES:
            r["graph_status"] = gtimes.get("error") or system.graph_note if args.graph else "not measured (--no-graph)"
        rows.append(r)
    return rows


def add_floor(rows, floor):
    """The machine's floor (2 phases) on the two-phase rows, and graph time / floor."""
    if floor is None:
        return
    for r in rows:
        if r.get("phase") not in TWO_PHASE:
            continue
        r.update(microbench.floor_fields(floor))
        if "graph_us_median" in r and "error" not in floor:
            r["graph_x_floor"] = r["graph_us_median"] / floor["us"]


def bench_shape(ctx, shape, args, micro, flusher):
    pool = common.InputPool(ctx, shape, args.pool, num_tokens=shape.max_tokens if args.max_counts else None)
    routing = Routing(ctx, shape, pool, micro)
    base = {
        "shape": shape.label,
        "experts": shape.experts,
        "topk": shape.topk,
        "hidden": shape.hidden,
        "max_tokens": shape.max_tokens,
        "dtype": common.DTYPE_NAMES[shape.dtype],
        "world": ctx.world,
        "tokens_per_rank": routing.tokens_per_rank,
        "sol_model": routing.sol_model,
    }
    check_inputs = None
    if args.check:
        check_inputs = [
            common.make_inputs(shape, r, ctx.world, common.pool_seed(shape, -1), ctx.device) for r in range(ctx.world)
        ]
    harness_floor = None
    if args.harness:  # a submission that does no communication at all
        harness_floor = summarize(
            common.time_harness(ctx, lambda inp: inp[0].clone(), pool.get, args.iters, args.warmup)
        )["median"]
    info = lambda name: dict(base, system=name)  # noqa: E731
    rows = bench_systems(ctx, shape, args, pool, routing, flusher, info, check_inputs, harness_floor)
    if args.trace:
        write_trace(ctx, shape, pool, args.trace, args, flusher)
    del pool
    torch.cuda.empty_cache()
    return rows


def bench_systems(ctx, shape, args, pool, routing, flusher, info_of, check_inputs, harness_floor=None):
    """Every system of args.system_list on one shape's pool: its check against the reference
    (with check_inputs), eager and graph times, and with harness_floor the challenge harness's
    time; one row per phase (info_of(system name) + statistics), then vs NCCL and the machine's floor.
    A system that fails is reported in its rows and the next one runs."""
    rows = []
    for name in args.system_list:
        system, why = build_system(name, ctx, shape, args)
        info = info_of(name)
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
            gtimes = measure_graph_or_error(ctx, system, pool, args, shape.max_tokens)
            harness = None
            if harness_floor is not None:
                harness = summarize(common.time_harness(ctx, system.run, pool.get, args.iters, args.warmup))["median"]
        except Exception as e:  # report and go on; a hang is not caught here
            status = common.error_status(e, name)
            rows += [dict(info, phase=ph, status=status) for ph in PHASES]
            system.close()
            continue
        new = system_rows(info, system, times, gtimes, routing, args, shape.max_tokens, check, status)
        for r in new:
            if harness is not None and r["phase"] == "pipeline":
                r.update(harness_us=harness, floor_us=harness_floor, above_floor_us=harness - harness_floor)
        rows += new
        system.close()
    add_vs_nccl(rows)
    add_floor(rows, shape_floor(ctx, routing, args))
    return rows


def add_vs_nccl(rows):
    """vs_nccl = NCCL eager time / this eager time: > 1 means faster than the NCCL baseline."""
    nccl = {(r["shape"], r["phase"]): r["us_median"] for r in rows if r["system"] == "nccl" and "us_median" in r}
    for r in rows:
        ref = nccl.get((r["shape"], r["phase"]))
        if ref and "us_median" in r:
            r["vs_nccl"] = ref / r["us_median"]


# ----------------------------------------------------------------------------- report
HEADERS = [
    "shape",
    "system",
    "phase",
    "tok/rank",
    "MB",
    "med us",
    "p10",
    "p90",
    "GB/s",
    "xSoL",
    "SoL us",
    "bound",
    "vsNCCL",
    "graph us",
    "g p10-p90",
    "g xSoL",
    "floor us",
    "check",
]
PHASE_ABBREV = {"dispatch+combine": "d+c"}


def graph_cells(r):
    """[graph us, g p10-p90, g xSoL, floor us] of a row."""
    floor = fmt(r.get("floor_exchange_us"))
    if "graph_us_median" in r:
        return [
            fmt(r["graph_us_median"]),
            f"{fmt(r['graph_us_p10'])}-{fmt(r['graph_us_p90'])}",
            fmt(r["graph_x_sol"], 2),
            floor,
        ]
    if r.get("phase") in GRAPH_PHASES and r.get("graph_status"):
        st = r["graph_status"]
        return [
            "eager only" if st.startswith("eager only") else ("error" if st.startswith("error") else "-"),
            "",
            "",
            floor,
        ]
    return ["", "", "", floor if r.get("phase") in TWO_PHASE else ""]


def table_rows(rows, harness=False):
    out = []
    for r in rows:
        phase = PHASE_ABBREV.get(r["phase"], r["phase"])
        if "us_median" not in r:
            line = [r["shape"], r["system"], phase, fmt(r.get("tokens_per_rank"))]
            out.append(line + [""] * (len(HEADERS) - 5) + [r["status"]] + ([""] * 3 if harness else []))
            continue
        line = (
            [
                r["shape"],
                r["system"],
                phase,
                fmt(r["tokens_per_rank"]),
                fmt(r["bytes"] / 1e6, 2),
                fmt(r["us_median"]),
                fmt(r["us_p10"]),
                fmt(r["us_p90"]),
                fmt(r["GBps"]),
                fmt(r["x_sol"], 2),
                fmt(r["sol_us"]),
                r.get("sol_bound", ""),
                fmt(r.get("vs_nccl"), 2),
            ]
            + graph_cells(r)
            + [r["check"] if r["status"] == "ok" else r["status"]]
        )
        if harness:
            line += [fmt(r.get("harness_us")), fmt(r.get("floor_us")), fmt(r.get("above_floor_us"))]
        out.append(line)
    return out


def floor_summary_rows(rows, system="moe_a2a"):
    """Per shape: the machine's floor for the shape's bytes next to `system`'s graph times."""
    out = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        dc = next(
            (r for r in rows if r["shape"] == shape and r["system"] == system and r["phase"] == "dispatch+combine"),
            None,
        )
        pipe = next(
            (r for r in rows if r["shape"] == shape and r["system"] == system and r["phase"] == "pipeline"), None
        )
        if dc is None or ("graph_us_median" not in dc and "floor_exchange_us" not in dc):
            continue
        blocks = dc.get("floor_exchange_blocks")
        out.append(
            [
                shape,
                fmt(dc.get("bytes", 0) / 2e6, 2),
                fmt(dc.get("floor_exchange_us")) + (f" ({blocks})" if blocks else ""),
                fmt(dc.get("graph_us_median")),
                fmt(dc.get("graph_x_floor"), 2),
                fmt((pipe or {}).get("graph_us_median")),
                fmt(dc.get("graph_sol_us", dc.get("sol_us"))),
                fmt(dc.get("graph_x_sol"), 2),
                dc.get("sol_bound", ""),
                fmt(dc.get("us_median")),
            ]
        )
    return out


FLOOR_HEADERS = [
    "shape",
    "MB/phase",
    "floor us (blocks)",
    "graph d+c",
    "x floor",
    "graph pipe",
    "SoL d+c",
    "x SoL",
    "bound",
    "eager d+c",
]


def print_formulas(micro):
    sol = common.sol_model()
    print("bytes = busiest GPU's max(sent, received) over the links: " + sol.FORMULA)
    print("SoL = " + sol.LOCAL_FORMULA)
    print(
        f"B = {micro['B_GBps']:.0f} GB/s ({micro['B_source']}), B_hbm = {micro['B_hbm_GBps']:.0f} GB/s "
        f"({micro['B_hbm_source']}), L = {micro['L_us']:.2f} us; xSoL = time / SoL (1 = physical limit), "
        "bound = the larger SoL term (link or local; dispatch/combine when they differ); "
        "vsNCCL = NCCL time / time (>1 = faster), eager"
    )
    print(
        "graph = CUDA-graph steady state (per iteration, max over ranks, median and p10-p90 over "
        "replays), moe_a2a only: the NCCL path needs a host sync for its split sizes and cannot be "
        "captured ('eager only'); floor us = the machine's floor for these bytes, 2 phases "
        "(bare exchange, microbench.floor_for_bytes)"
    )


def print_report(rows, micro, harness):
    print()
    print_formulas(micro)
    heads = HEADERS + (["harness us", "harness floor", "above floor"] if harness else [])
    common.print_table(heads, table_rows(rows, harness))
    fl = floor_summary_rows(rows)
    if fl:
        print("\nmoe_a2a in CUDA-graph steady state against the machine's floor (us per dispatch + combine):")
        common.print_table(FLOOR_HEADERS, fl)
    print("\ngeomean of the eager pipeline median (us) over the shapes both it and nccl ran:")
    med = {(r["system"], r["shape"]): r["us_median"] for r in rows if r["phase"] == "pipeline" and "us_median" in r}
    for x in dict.fromkeys(r["system"] for r in rows):
        shapes = [s for (y, s) in med if y == x and ("nccl", s) in med]
        if shapes:
            g, gn = (common.geomean([med[(y, s)] for s in shapes]) for y in (x, "nccl"))
            print(f"  {x:10s} {fmt(g):>10s}   nccl {fmt(gn):>10s}   vsNCCL {fmt(gn / g, 2)}   ({len(shapes)} shapes)")


def plot(rows, path):
    plt = common.pyplot()
    if plt is None:
        return
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    # every system's eager bars, then "<system> graph" bars where a graph was timed
    series = [(s, "us_median") for s in dict.fromkeys(r["system"] for r in rows)]
    series += [(s, "graph_us_median") for s in dict.fromkeys(r["system"] for r in rows if "graph_us_median" in r)]
    fig, axes = plt.subplots(1, len(PHASES), figsize=(6 * len(PHASES), 5), sharey=True)
    width = 0.8 / max(len(series), 1)
    for ax, ph in zip(axes, PHASES):
        for k, (s, key) in enumerate(series):
            xs, ys = [], []
            for i, sh in enumerate(shapes):
                r = next(
                    (r for r in rows if r["shape"] == sh and r["system"] == s and r["phase"] == ph and key in r), None
                )
                if r:
                    xs.append(i - 0.4 + width * (k + 0.5))
                    ys.append(r[key])
            ax.bar(
                xs,
                ys,
                width,
                label=s if key == "us_median" else f"{s} graph",
                hatch=None if key == "us_median" else "//",
            )
        for i, sh in enumerate(shapes):  # speed of light: a black bar across the group
            sol = next((r["sol_us"] for r in rows if r["shape"] == sh and r["phase"] == ph and "sol_us" in r), None)
            if sol:
                ax.hlines(sol, i - 0.45, i + 0.45, colors="k", linewidth=2, label="speed of light" if i == 0 else None)
            fl = next(
                (
                    r["floor_exchange_us"]
                    for r in rows
                    if r["shape"] == sh and r["phase"] == ph and "floor_exchange_us" in r
                ),
                None,
            )
            if fl:
                ax.hlines(
                    fl,
                    i - 0.45,
                    i + 0.45,
                    colors="r",
                    linewidth=1.5,
                    linestyles="--",
                    label="machine floor" if i == 0 else None,
                )
        ax.set_yscale("log")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=30, ha="right", fontsize=8)
        ax.set_title(ph)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("median latency (us), max over ranks")
    handles, labels = [], []
    for ax in axes:  # the floor appears only on the two-phase axes
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=9)
    scaffold.save_figure(plt, fig, path, rect=(0, 0, 1, 0.93))


def write_outputs(ctx, args, name, rows, micro):
    """Rank 0: OUT/name.json (meta, config, microbench, formula, rows) and OUT/name.csv."""
    if ctx.rank != 0:
        return
    sol = common.sol_model()
    doc = {
        "meta": common.metadata(ctx),
        "config": scaffold.settings(args, without=("shape_list",)),
        "microbench": micro,
        "formula": {"link": sol.FORMULA, "sol": sol.LOCAL_FORMULA},
        "rows": rows,
    }
    scaffold.write_results(args.out, name, doc)


def run(args, name, bench_case, header, print_report, plot, after=None):
    """The main() of bench_all2all.py and bench_sweep.py: the machine's numbers (microbench),
    then bench_case(ctx, shape, args, micro, flusher) per shape of args.shape_list (rank 0 prints
    header(ctx, shape) first and calls after(rows, new) after), then on rank 0
    print_report(rows, micro) and plot(rows, micro, PNG path), then OUT/name.json/.csv."""
    ctx = common.init_benchmark()
    micro = get_micro(ctx, args)
    flusher = common.L2Flusher(ctx.device, args.flush_mib * common.MiB, args.preroll_us)
    rows = scaffold.run_cases(
        ctx,
        args.shape_list,
        lambda shape: bench_case(ctx, shape, args, micro, flusher),
        lambda shape: header(ctx, shape),
        after,
    )
    if ctx.rank == 0:
        print_report(rows, micro)
        plot(rows, micro, os.path.join(args.out, f"{name}.png"))
    write_outputs(ctx, args, name, rows, micro)
    scaffold.finish()


def print_floor_lines(rows, new):
    """After a shape: moe_a2a's graph d+c next to the machine's floor, one line."""
    for line in floor_summary_rows(new):
        print(
            f"   moe_a2a graph d+c {line[3]} us, machine floor {line[2]} us for {line[1]} MB "
            f"per phase (x floor {line[4]}), graph pipeline {line[5]} us",
            flush=True,
        )


def main(argv=None):
    args = parse_args(argv)
    run(
        args,
        "bench_all2all",
        bench_shape,
        lambda ctx, shape: f"== {shape.label} {common.DTYPE_NAMES[shape.dtype]} seed {shape.seed}, world {ctx.world}",
        lambda rows, micro: print_report(rows, micro, args.harness),
        lambda rows, micro, path: plot(rows, path),
        after=print_floor_lines,
    )


if __name__ == "__main__":
    main()
