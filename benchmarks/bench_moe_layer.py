"""Latency of the expert-parallel MoE layer (moe_a2a.layers.ExpertParallelMoE) and of its parts,
DeepSeek-V3 shape by default (256 experts, top-8, hidden 7168, expert FFN 2048, bf16, packed).

    torchrun --nproc-per-node=<N> benchmarks/bench_moe_layer.py [--tokens 128,512,2048] [--counts max;drawn]
        [--out DIR]

For each T (the layer's tokens per rank) and each --counts spec (default "max": every rank sends
exactly T; "drawn": each rank and pool entry its own count, uniform in 1..T, as the challenge draws
them; "a/b[/c...]": rank r sends entry r % n, 0 allowed), device time in us of
    forward    the layer's forward under no_grad (route, dispatch, experts, combine)
    dispatch   ep.dispatch alone (routing computed untimed before; combine untimed after)
    combine    ep.combine alone, with the dispatch output as the expert output
    experts    expert_swiglu alone on a dispatch output (grouped GEMMs for bf16 on sm90+)
    fwd+bwd    the layer's forward and backward (fixed output gradient; parameter grads reset untimed)
    dispatch-bwd   the backward round of dispatch alone (grad of x from a gradient of expert_x), right
                   after a forward round (dispatch, then a combine under no_grad)
    dispatch-bwd-train  the same right after the backward of combine (untimed), autograd's order in a
                   training step
    combine-bwd    the backward round of combine alone (grads of the expert output and topk_weights)
    combine-bwd-y  the same with topk_weights needing no gradient (a frozen router): only the expert
                   output's gradient, and the round does not read the expert output
    hbm-y      no all-to-all: the rows this rank's experts got, read from one buffer and written
               scaled to another (torch.mul): the bytes of y and of its gradient that the backward
               of combine moves through this GPU's memory whatever the link does, its local floor
    graph-fwd    dispatch + combine (the expert output = expert_x), no autograd, in CUDA-graph steady
                 state: --graph-iters calls over the pool's entries captured in one graph, per call
    graph-train  the same rounds with autograd and their two backward rounds (x's and the router
                 weights' gradients): a training step's four rounds as an engine that graphs its
                 layers (or the whole step) replays them; graph-train - graph-fwd is the backward pair
Each is timed with CUDA events on every rank, then the max over ranks per iteration (per replay
for the graph phases); the table gives the median and p10-p90 over iterations, with fresh tokens
from a pool and L2 flushed before every iteration (benchmarks/common.py; a graph replay runs its
calls back to back with no flush between them, as bench_graph.py's do). TFLOP/s counts the
experts' GEMMs of the average rank (T x K rows, T the mean count over ranks and pool entries: every
rank receives that many rows on average) against the max-over-ranks time.

A second table puts each backward round next to the forward round it mirrors, gives the all-to-all's
share of fwd+bwd, the backward of combine over hbm-y (its local floor) and hbm-y over dispatch (the
least combine-bwd / dispatch that this GPU's memory allows), and each pair of all-to-all rounds
(forward: dispatch + combine; backward: combine-bwd + dispatch-bwd, about the bytes of one d+c too:
MIRROR_LEGEND) over the machine's floor for one d+c of the layer's bytes (--floor, default on):
microbench.floor_for_bytes (a bare exchange, one kernel per phase, CUDA-graph steady state),
measured once per T after the layer is freed, for the bytes each way of one phase of the pool's
routes (busiest GPU, median over the pool: microbench.routes_floor_bytes, the rule bench_graph's
floor uses).

--weights-at-experts builds the layer with the router weights applied at the experts
(ExpertParallelMoE(weights_at_experts=True): docs/design/weights-at-experts.md). The backward of
dispatch then carries the router weights' gradients too (dispatch-bwd and dispatch-bwd-train give
expert_weights a gradient as well as expert_x), and the backward of combine never computes them:
combine-bwd is then the round combine-bwd-y times, whatever the router needs.

--capacity N builds every layer for N tokens a rank (max_num_tokens; default each T itself), as a
serving or training engine sized for its largest batch runs smaller ones: the kernels some rounds
pick follow the engine's capacity, not the call's count (the backward of combine's sub-ranges,
docs/design/protocol.md), so `--capacity 2048 --tokens 128,512,2048` times what such an engine
sees.

--trace PATH writes the in-kernel profiler's timeline of one call of each all-to-all phase asked
(dispatch, combine and the backward rounds), after that T's timings, to
PATH-T<T>-<counts>-<phase>.json (moe_a2a.trace: summary, chain, Perfetto). It needs a build with
MOE_A2A_PROFILE=1, and the layer's AllToAll records every round then: the timings of that run
include the profiler's cost.

Memory per rank: E/world experts x 3 matrices of H x F (11 GiB in bf16 at world 2 for the
default shape), their gradients for fwd+bwd, and the packed buffers sized by max_recv_tokens,
which is the worst case T x world x K rows capped by --recv-budget-mib.
"""

import common  # noqa: F401  (first: pins NVLink multicast off before torch.distributed loads)
import microbench
import scaffold
import torch
from common import fmt, summarize

PHASES = (
    "forward",
    "dispatch",
    "combine",
    "experts",
    "fwd+bwd",
    "dispatch-bwd",
    "combine-bwd",
    "combine-bwd-y",
    "hbm-y",
    "dispatch-bwd-train",  # late: an error in a phase marks the later ones of its T failed (bench_tokens)
    "graph-fwd",
    "graph-train",
)
# Phases that build an autograd graph (the rest run under no_grad).
GRAD_PHASES = ("fwd+bwd", "dispatch-bwd", "dispatch-bwd-train", "combine-bwd", "combine-bwd-y", "graph-train")
# Phases timed as CUDA-graph steady state (common.time_graph); the others eagerly (common.time_device).
GRAPH_PHASES = ("graph-fwd", "graph-train")
# Phases --trace records: one all-to-all round each (forward, experts and fwd+bwd are more).
TRACED_PHASES = ("dispatch", "combine", "dispatch-bwd", "dispatch-bwd-train", "combine-bwd", "combine-bwd-y")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DEFAULT_SHAPE = "256,8,7168,2048"  # DeepSeek-V3: n_routed_experts, top-k, hidden_size, moe_intermediate_size
MIN_ITERS = 10
MIN_GRAPH_INPUTS = 8  # common.time_graph's least number of different inputs


def parse_args(argv=None):
    p = scaffold.parser(__doc__)
    p.add_argument("--tokens", default="128,512,2048", help="comma list of tokens per rank (default 128,512,2048)")
    p.add_argument(
        "--counts",
        default="max",
        help='";"-separated per-rank count specs, each T run once per spec: "max" (default: every rank T),\n'
        '"drawn" (uniform in 1..T per rank and pool entry), "a/b[/c...]" (rank r sends entry r %% n, each <= T)',
    )
    p.add_argument(
        "--shape", default=DEFAULT_SHAPE, help=f"experts,topk,hidden,ffn (default DeepSeek-V3: {DEFAULT_SHAPE})"
    )
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    scaffold.add_layout(p, "packed")
    p.add_argument("--phases", default=",".join(PHASES), help=f"comma list from {list(PHASES)} (default all)")
    p.add_argument(
        "--recv-budget-mib",
        type=int,
        default=4096,
        help="cap on the dispatch output (packed: max_recv_tokens rows; padded: rows per\n"
        "expert x local experts) in MiB; the worst case is used when it fits (default 4096)",
    )
    scaffold.add_capacity(p, "the layer")
    scaffold.add_iters(p, 50)
    scaffold.add_warmup(p, 5)
    p.add_argument(
        "--pool",
        type=int,
        default=8,
        help="distinct token batches cycled through (default 8; the graph phases need 8 or more)",
    )
    p.add_argument(
        "--graph-iters", type=int, default=10, help="calls captured in one CUDA graph by the graph phases (default 10)"
    )
    scaffold.add_seed(p)
    common.add_device_timing_args(p, 1000.0, "default 1000; fwd+bwd launches more than that covers at small T")
    scaffold.add_switch(
        p, "--check", "compare the experts' fast path with one matmul per expert once per T (default on)"
    )
    scaffold.add_switch(
        p, "--floor", "measure the machine's floor for each T's bytes, after the layer is freed (default on)"
    )
    scaffold.add_switch(
        p,
        "--weights-at-experts",
        "the router weights applied at the experts, combine unweighted\n"
        "(ExpertParallelMoE(weights_at_experts=True); default off)",
        default=False,
    )
    scaffold.add_out(p, "bench_moe_layer.json / .csv")
    p.add_argument(
        "--trace",
        metavar="PATH",
        help="after each T's timings, a profiler trace of one call of each all-to-all phase asked, to\n"
        "PATH-T<T>-<counts>-<phase>.json (needs a build with MOE_A2A_PROFILE=1; timings then include\n"
        "the profiler's cost)",
    )
    args = p.parse_args(argv)
    args.token_list = scaffold.ints(p, "--tokens", args.tokens)
    args.experts, args.topk, args.hidden, args.ffn = scaffold.sizes(
        p, "--shape", args.shape, ("experts", "topk", "hidden", "ffn")
    )
    if args.topk > args.experts:
        p.error("--shape: topk <= experts")
    args.phase_list = scaffold.names(p, "--phases", args.phases, PHASES)
    try:  # every count at most the smallest T; no presets (they are bench_graph's shapes' pairs)
        args.count_list = common.count_specs(
            args.counts, min(args.token_list), f"--tokens {min(args.token_list)}", presets=False
        )
    except ValueError as e:
        p.error(str(e))
    scaffold.check_capacity(p, args, max(args.token_list), "--tokens")
    if args.trace and not any(ph in TRACED_PHASES for ph in args.phase_list):
        p.error(f"--trace: --phases names none of {list(TRACED_PHASES)}")
    scaffold.at_least(p, args, iters=MIN_ITERS, pool=1, warmup=0, recv_budget_mib=1, graph_iters=1)
    graphed = [ph for ph in args.phase_list if ph in GRAPH_PHASES]
    if graphed and args.pool < MIN_GRAPH_INPUTS:
        p.error(f"--phases {','.join(graphed)}: needs --pool >= {MIN_GRAPH_INPUTS} (got {args.pool})")
    args.dtype_t = DTYPES[args.dtype]
    return args


# ----------------------------------------------------------------------------- pure helpers
def pool_counts(spec, T, world, rank, size, seed):
    """This rank's token count in each of `size` pool entries for a --counts spec at T tokens per
    rank: "max" T, "drawn" uniform in 1..T (seeded by seed, rank and entry), else its entry."""
    if spec != "drawn":
        return [common.spec_num_tokens(spec, world, T)[rank]] * size
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    return [int(torch.randint(1, T + 1, (1,), generator=gen)) for _ in range(size)]


def case_of(row):
    """A row's case as the tables show it: T, or "T spec" for counts other than "max"."""
    counts = row.get("counts", "max")
    return row["tokens"] if counts == "max" else f"{row['tokens']} {counts}"


def recv_capacity(layout, tokens, world, experts, topk, hidden, elem_bytes, budget_bytes):
    """(max_recv_tokens, max_recv_tokens_per_expert) for the layer, one of them None.

    packed: rows of the packed output; the worst case is every (token, k) pair of every rank
    landing here, T x world x K (top-k experts are distinct, so a token counts K times only
    when this rank owns K of them). padded: rows per local expert; the worst case is every
    rank's every token, T x world. Either is capped so the output stays within the budget;
    a cap below the actual load makes dispatch report a capacity overflow."""
    row = hidden * elem_bytes
    if layout == "packed":
        worst = tokens * world * min(topk, experts // world)
        return max(1, min(worst, budget_bytes // row)), None
    local = experts // world
    return None, max(1, min(tokens * world, budget_bytes // (row * local)))


def expert_flops(rows, hidden, ffn, backward=False):
    """GEMM flops of SwiGLU experts over `rows` rows: gate, up, down = 3 x 2 x rows x H x F;
    backward adds the input and the weight gradient of each (2x the forward)."""
    fwd = 3 * 2 * rows * hidden * ffn
    return 3 * fwd if backward else fwd


def rows_of_rank(ids_of_ranks, experts, world, rank):
    """The rows `rank`'s experts get from every rank's expert ids [tokens, K] (one tensor a rank,
    -1: no expert): each (token, k) whose expert is one of its experts // world."""
    per = experts // world
    return sum(int(((ids >= rank * per) & (ids < (rank + 1) * per)).sum()) for ids in ids_of_ranks)


def weight_bytes_per_rank(experts, world, hidden, ffn, elem_bytes):
    return (experts // world) * 3 * hidden * ffn * elem_bytes


def phase_row(base, phase, us, flops=None):
    s = summarize(us)
    row = dict(base, phase=phase, status="ok", us_median=s["median"], us_p10=s["p10"], us_p90=s["p90"], n=s["n"])
    if flops:
        row["tflops"] = flops / (s["median"] * 1e6) if s["median"] > 0 else float("nan")
    return row


HEADERS = ["T/rank", "phase", "med us", "p10", "p90", "TFLOP/s", "peak GiB", "status"]


def table_rows(rows):
    out = []
    for r in rows:
        if "us_median" not in r:
            out.append([case_of(r), r["phase"], "", "", "", "", fmt(r.get("peak_gib"), 1), r["status"]])
            continue
        out.append(
            [
                case_of(r),
                r["phase"],
                fmt(r["us_median"]),
                fmt(r["us_p10"]),
                fmt(r["us_p90"]),
                fmt(r.get("tflops")),
                fmt(r.get("peak_gib"), 1),
                r["status"],
            ]
        )
    return out


# Each backward round next to the forward round it mirrors: the same bytes the other way (the
# backward of dispatch is a combine of gradients, the backward of combine a dispatch of them plus
# a dot product per (token, k); without the router's gradient, no dot product).
MIRRORS = (("combine-bwd", "dispatch"), ("dispatch-bwd", "combine"), ("combine-bwd-y", "dispatch"))
A2A_PHASES = ("dispatch", "combine", "dispatch-bwd", "combine-bwd")
# The pairs of rounds that each cross the links like one dispatch + combine: the forward pair, and
# the backward pair (combine's backward sends the output gradients like a dispatch, plus K floats
# per token back; dispatch's backward is a combine of gradients). The floor of one d+c for the
# layer's bytes is therefore each pair's floor.
PAIRS = (("dispatch", "combine"), ("combine-bwd", "dispatch-bwd"))
# The backward of combine over its local floor, and that floor over the forward dispatch: where
# hbm-y alone takes longer than 1.1 dispatches, no schedule brings combine-bwd to 1.1x.
HBM_RATIOS = (("combine-bwd", "hbm-y"), ("hbm-y", "dispatch"))
MIRROR_HEADERS = [
    "T/rank",
    "combine-bwd / dispatch",
    "dispatch-bwd / combine",
    "combine-bwd-y / dispatch",
    "all-to-all share of fwd+bwd",
    "combine-bwd / hbm-y",
    "hbm-y / dispatch",
    "floor us",
    "KB each way",
    "(d + c) / floor",
    "(c-bwd + d-bwd) / floor",
    "graph: d + c / floor",
    "graph: bwd pair / floor",
    "graph: bwd pair / d + c",
]
MIRROR_LEGEND = (
    "each backward round over its forward mirror (medians), the all-to-all's share of a training step, the\n"
    "backward of combine over hbm-y (y's rows read and their gradient's written: its local floor) and hbm-y over\n"
    "dispatch (the least combine-bwd / dispatch this GPU's memory allows), and\n"
    "each pair of all-to-all rounds (the sum of its medians) over the machine's floor for its bytes, measured in\n"
    "this run (a bare exchange of one dispatch + combine, one kernel per phase, graph steady state; KB each way\n"
    "per phase from the layer's routes). The backward pair moves about the bytes of one d + c (combine-bwd\n"
    "sends the output gradients like a dispatch, plus K floats per token back; dispatch-bwd is a combine),\n"
    "so the floor of a d + c is its floor too. The pairs are eager device time: launches are included.\n"
    "graph: the same pairs in CUDA-graph steady state, as the floor is timed: graph-fwd (d + c), and the\n"
    "backward pair as graph-train's median less graph-fwd's."
)


def pair_over_floor(median, pair, floor_us):
    """The sum of the medians of a pair of phases over the floor's us, or None when a phase of the
    pair did not run or there is no floor. median: {phase: us}."""
    if not floor_us or any(p not in median for p in pair):
        return None
    return sum(median[p] for p in pair) / floor_us


def mirror_rows(rows):
    """Per token count: each backward round's median over its forward mirror's, the four
    all-to-all rounds' share of a training step (their medians summed over fwd+bwd's), the floor
    (us, KB each way per phase), each pair of PAIRS over it, and the graph phases' pairs over it
    and over each other; "-" where a phase did not run or the floor was not measured."""
    out = []
    for T in dict.fromkeys(case_of(r) for r in rows):
        of_T = [r for r in rows if case_of(r) == T]
        median = {r["phase"]: r["us_median"] for r in of_T if "us_median" in r}
        ratios = [median[b] / median[f] if b in median and f in median else None for b, f in MIRRORS]
        a2a = [median.get(p) for p in A2A_PHASES]
        step = median.get("fwd+bwd")
        share = f"{100 * sum(a2a) / step:.1f}%" if step and None not in a2a else None
        local = [median[a] / median[b] if a in median and b in median else None for a, b in HBM_RATIOS]
        floor_us = next((r["floor_exchange_us"] for r in of_T if "floor_exchange_us" in r), None)
        nbytes = next((r["floor_exchange_bytes"] for r in of_T if "floor_exchange_bytes" in r), None)
        kb = nbytes / 1e3 if nbytes is not None else None
        pairs = [pair_over_floor(median, p, floor_us) for p in PAIRS]
        fwd, train = median.get("graph-fwd"), median.get("graph-train")
        bwd = train - fwd if fwd is not None and train is not None else None
        graphed = [
            fwd / floor_us if fwd is not None and floor_us else None,
            bwd / floor_us if bwd is not None and floor_us else None,
            bwd / fwd if bwd is not None and fwd else None,
        ]
        out.append(
            [T]
            + [fmt(x, 2) for x in ratios]
            + [fmt(share)]
            + [fmt(x, 2) for x in local]
            + [fmt(floor_us), fmt(kb)]
            + [fmt(x, 2) for x in pairs + graphed]
        )
    return out


def floor_notes(rows):
    """One line per token count whose floor was not measured, with the reason."""
    why = {case_of(r): r["floor_exchange_status"] for r in rows if "floor_exchange_status" in r}
    return [f"T={T}: floor not measured: {w}" for T, w in why.items()]


# ----------------------------------------------------------------------------- measuring
def check_experts(layer, x, expert_swiglu, route):
    """The fast expert path against one matmul per expert (impl="loop") on the rows of an
    expert: relative L2 error, which should be a few bf16 ulps (< 1e-2)."""
    from moe_a2a.layers import expert_row_mask

    with torch.no_grad():
        idx, w = route(x, layer.router_weight, layer.experts_per_token, layer.normalize_topk)
        d = layer.ep.dispatch(x, idx, w)
        args = (d.expert_x, d.expert_offsets, d.expert_num_tokens, layer.w_gate, layer.w_up, layer.w_down, layer.layout)
        fast = expert_swiglu(*args)
        slow = expert_swiglu(*args, impl="loop")
        layer.ep.combine(fast, d)
        H = layer.hidden_dim
        valid = expert_row_mask(d.expert_offsets, d.expert_num_tokens, fast.reshape(-1, H).shape[0])
        a, b = fast.reshape(-1, H)[valid].float(), slow.reshape(-1, H)[valid].float()
        err = ((a - b).norm() / b.norm().clamp_min(1e-30)).item() if b.numel() else 0.0
    layer.ep.synchronize()
    return err


def bench_tokens(ctx, args, T, counts, flusher):
    from moe_a2a.dense_moe import route
    from moe_a2a.layers import ExpertParallelMoE, expert_swiglu

    elem = torch.tensor([], dtype=args.dtype_t).element_size()
    capacity = args.capacity or T  # the engine's tokens a rank: the dispatch output is sized for it too
    recv, recv_per_expert = recv_capacity(
        args.layout, capacity, ctx.world, args.experts, args.topk, args.hidden, elem, args.recv_budget_mib * common.MiB
    )
    sizes = pool_counts(counts, T, ctx.world, ctx.rank, args.pool, args.seed)
    base = {
        "tokens": T,
        "capacity": capacity,
        "counts": counts,
        # each rank's mean count over the pool entries (every rank's counts: a collective)
        "rank_tokens": [
            n.float().mean().item() for n in common.gather_rows(ctx, torch.tensor(sizes, device=ctx.device))
        ],
        "world": ctx.world,
        "experts": args.experts,
        "topk": args.topk,
        "hidden": args.hidden,
        "ffn": args.ffn,
        "dtype": args.dtype,
        "layout": args.layout,
        "max_recv_tokens": recv,
        "max_recv_tokens_per_expert": recv_per_expert,
        "weight_gib_per_rank": weight_bytes_per_rank(args.experts, ctx.world, args.hidden, args.ffn, elem) / 2**30,
        "weights_at_experts": args.weights_at_experts,
    }
    torch.cuda.reset_peak_memory_stats(ctx.device)
    # init_seed=None: weights drawn on the GPU (seconds for the CPU draw of 11 GiB otherwise)
    layer = ExpertParallelMoE(
        args.hidden,
        args.ffn,
        args.experts,
        args.topk,
        capacity,
        group=ctx.group,
        dtype=args.dtype_t,
        layout=args.layout,
        max_recv_tokens=recv,
        max_recv_tokens_per_expert=recv_per_expert,
        device=ctx.device,
        init_seed=None,
        profile=bool(args.trace),
        weights_at_experts=args.weights_at_experts,
    )
    rows = []
    try:
        ep = layer.ep
        gen = torch.Generator(device=ctx.device)
        gen.manual_seed(args.seed * 1_000_003 + ctx.rank)
        pool = [torch.randn(n, args.hidden, generator=gen, device=ctx.device).to(args.dtype_t) for n in sizes]
        grad_full = torch.randn(T, args.hidden, generator=gen, device=ctx.device).to(args.dtype_t)

        def grad_out(out):  # the fixed output gradient, cut to a pool entry's count
            return grad_full[: out.shape[0]]

        with torch.no_grad():
            routes = [route(x, layer.router_weight, args.topk, layer.normalize_topk) for x in pool]
        gathered = [common.gather_rows(ctx, idx) for idx, _ in routes]  # collective
        rows_here = [rows_of_rank(ids, args.experts, ctx.world, ctx.rank) for ids in gathered]
        if args.floor:  # the floor's bytes from every rank's expert ids; measured in layer_floor
            base["floor_exchange_bytes"] = microbench.routes_floor_bytes(
                gathered, args.experts, ctx.world, args.hidden, args.dtype_t
            )
        if ctx.rank == 0:
            print(f"  T={T}: capacity {ep.capacity}, weights {base['weight_gib_per_rank']:.1f} GiB/rank", flush=True)
        if args.check:
            err = check_experts(layer, pool[0], expert_swiglu, route)
            errs = common.max_over_ranks(ctx, [err])
            base["check"] = f"{'pass' if errs[0] < 1e-2 else 'FAIL'} ({errs[0]:.1e})"
            if ctx.rank == 0:
                print(f"  T={T}: experts fast path vs per-expert matmuls, rel L2 error {base['check']}", flush=True)

        def get(i):
            return i % len(pool)

        def dispatch_of(i):
            j = get(i)
            return ep.dispatch(pool[j], *routes[j])

        def experts_of(d):  # with the weights at the experts, applied here as the layer does
            return expert_swiglu(
                d.expert_x,
                d.expert_offsets,
                d.expert_num_tokens,
                layer.w_gate,
                layer.w_up,
                layer.w_down,
                layer.layout,
                row_weights=d.expert_weights if args.weights_at_experts else None,
            )

        def fwd_bwd_prep(i):
            layer.zero_grad(set_to_none=True)
            return pool[get(i)].detach().requires_grad_(True)

        def backward_of_dispatch(x, w, d, grad_x_rows):  # x_grad's (inputs, outputs, their gradients)
            if not args.weights_at_experts:
                return x, d.expert_x, grad_x_rows
            return (x, w), (d.expert_x, d.expert_weights), (grad_x_rows, torch.ones_like(d.expert_weights))

        def differentiable_dispatch(i):  # x, and with the weights at the experts w, needing a gradient
            idx, w = routes[get(i)]
            x = pool[get(i)].detach().requires_grad_(True)
            w = w.detach().requires_grad_(args.weights_at_experts)
            return x, w, ep.dispatch(x, idx, w)

        def dispatch_graph(i):  # untimed: a differentiable dispatch, its round closed by a plain combine
            x, w, d = differentiable_dispatch(i)
            with torch.no_grad():
                ep.combine(d.expert_x, d)
            return backward_of_dispatch(x, w, d, torch.ones_like(d.expert_x))

        def train_order_graph(i):  # untimed: a differentiable round, then its backward of combine
            x, w, d = differentiable_dispatch(i)
            y = d.expert_x.detach().requires_grad_(True)
            out = ep.combine(y, d)
            (grad_y,) = torch.autograd.grad(out, y, grad_out(out))  # the backward of combine, not dispatch's
            return backward_of_dispatch(x, w, d, grad_y)

        def x_grad(g):  # timed: the backward of dispatch alone, x's (and w's) gradient from expert_x's
            return torch.autograd.grad(g[1], g[0], g[2])

        def combine_graph(i, router_grad=True):  # untimed: dispatch, then a combine that needs y's gradient
            idx, w = routes[get(i)]  # and, with router_grad, the weights' (never combine's at the experts)
            w = w.detach().requires_grad_(router_grad and not args.weights_at_experts)
            d = ep.dispatch(pool[get(i)], idx, w)
            y = d.expert_x.detach().requires_grad_(True)
            return ep.combine(y, d), y, w

        if "graph-train" in args.phase_list:  # leaves of their own: the graph's gradients are not pool's
            graph_x = [x.detach().requires_grad_(True) for x in pool]
            graph_w = [w.detach().requires_grad_(True) for _, w in routes]

        def graph_step(i, train):  # one call of a graph phase on pool entry i: d + c, and with train their backward
            idx, w = routes[i]
            x, w = (graph_x[i], graph_w[i]) if train else (pool[i], w)
            d = ep.dispatch(x, idx, w)
            out = ep.combine(d.expert_x, d)
            if train:
                torch.autograd.grad(out, (x, w), grad_out(out))

        if "hbm-y" in args.phase_list:  # hbm-y's two buffers, as large as the most rows of a pool entry
            y_rows = torch.empty(max(rows_here), args.hidden, dtype=args.dtype_t, device=ctx.device)
            grad_rows = torch.empty_like(y_rows)

        def hbm_y_rows(i):
            n = rows_here[get(i)]
            return y_rows[:n], grad_rows[:n]

        rows_per_rank = sum(base["rank_tokens"]) / ctx.world * args.topk  # the average rank's received rows
        flops = {
            "forward": expert_flops(rows_per_rank, args.hidden, args.ffn),
            "experts": expert_flops(rows_per_rank, args.hidden, args.ffn),
            "fwd+bwd": expert_flops(rows_per_rank, args.hidden, args.ffn, backward=True),
        }
        timed = {
            "forward": dict(fn=lambda j: layer(pool[j]), prepare=get),
            "dispatch": dict(
                fn=lambda j: ep.dispatch(pool[j], *routes[j]), prepare=get, after=lambda d: ep.combine(d.expert_x, d)
            ),
            "combine": dict(fn=lambda d: ep.combine(d.expert_x, d), prepare=dispatch_of),
            "experts": dict(
                fn=lambda d: (experts_of(d), d), prepare=dispatch_of, after=lambda r: ep.combine(r[0], r[1])
            ),
            "fwd+bwd": dict(fn=lambda x: layer(x).backward(grad_out(x)), prepare=fwd_bwd_prep),
            "dispatch-bwd": dict(fn=x_grad, prepare=dispatch_graph),
            "dispatch-bwd-train": dict(fn=x_grad, prepare=train_order_graph),
            "combine-bwd": dict(
                fn=lambda g: torch.autograd.grad(g[0], (g[1], g[2]) if g[2].requires_grad else g[1], grad_out(g[0])),
                prepare=combine_graph,
            ),
            "combine-bwd-y": dict(
                fn=lambda g: torch.autograd.grad(g[0], g[1], grad_out(g[0])),
                prepare=lambda i: combine_graph(i, router_grad=False),
            ),
            "hbm-y": dict(fn=lambda r: torch.mul(r[0], 0.5, out=r[1]), prepare=hbm_y_rows),
            "graph-fwd": dict(step=lambda i: graph_step(i, train=False)),
            "graph-train": dict(step=lambda i: graph_step(i, train=True)),
        }
        for phase in args.phase_list:
            spec = timed[phase]
            grad = torch.enable_grad() if phase in GRAD_PHASES else torch.no_grad()
            with grad:
                if phase in GRAPH_PHASES:
                    us = common.time_graph(ctx, spec["step"], len(pool), args.graph_iters, args.iters)
                else:
                    us = common.time_device(
                        ctx,
                        spec["fn"],
                        args.iters,
                        args.warmup,
                        prepare=spec["prepare"],
                        flusher=flusher,
                        after=spec.get("after"),
                    )
            ep.synchronize()  # device-side errors (capacity overflow, ...) surface here
            rows.append(phase_row(base, phase, us, flops.get(phase)))
        if args.trace:
            for phase in args.phase_list:
                if phase in TRACED_PHASES:
                    write_trace(ctx, ep, timed[phase], phase, trace_path(args.trace, T, counts, phase))
        layer.zero_grad(set_to_none=True)
    except Exception as e:  # report and go on with the next T; a hang is not caught here
        done = {r["phase"] for r in rows}
        status = common.error_status(e, f"the layer at T={T}, counts {counts}")
        rows += [dict(base, phase=ph, status=status) for ph in args.phase_list if ph not in done]
    finally:
        layer.close()
    peak = common.max_over_ranks(ctx, [torch.cuda.max_memory_allocated(ctx.device) / 2**30])[0]
    for r in rows:
        r["peak_gib"] = peak
    return rows  # the layer's weights are freed with this frame


def trace_path(prefix, T, counts, phase):
    """--trace's file of one (T, counts, phase): counts specs hold "/", which a file name cannot."""
    return f"{prefix}-T{T}-{counts.replace('/', '_')}-{phase}.json"


def write_trace(ctx, ep, spec, phase, path):
    """Collective. One call of a timed phase's spec with the profiler's buffers emptied just
    before it, its records saved to `path` (moe_a2a.trace.save) before the untimed call after it,
    so the trace holds that round alone; then `after`, which closes the round."""
    from moe_a2a import trace

    grad = torch.enable_grad() if phase in GRAD_PHASES else torch.no_grad()
    with grad:
        arg = spec["prepare"](0)
        ep.synchronize()
        ep.profile_reset()
        ctx.align()
        result = spec["fn"](arg)
        ep.synchronize()
        trace.save(path, ep)
        if spec.get("after") is not None:
            spec["after"](result)
    ep.synchronize()
    if ctx.rank == 0:
        print(f"  trace of {phase}: {path}", flush=True)


def layer_floor(ctx, rows):
    """Collective. The row fields (microbench.floor_fields) of the machine's floor for the bytes
    bench_tokens recorded in `rows` (the same on every rank: counted from the gathered routes).
    Called after the layer is freed, so its heap never competes with the weights."""
    nbytes = next((r["floor_exchange_bytes"] for r in rows if "floor_exchange_bytes" in r), None)
    if nbytes is None:
        return {"floor_exchange_status": "not measured: the layer failed before its routes were counted"}
    try:
        floor = microbench.floor_for_bytes(ctx, nbytes)
    except Exception as e:  # the heap's allocation (collective: the same on every rank)
        floor = {"bytes": nbytes, "error": f"{type(e).__name__}: {e}"}
    return microbench.floor_fields(floor)


def main(argv=None):
    args = parse_args(argv)
    mod, why = common.import_moe_a2a()  # before NCCL starts: moe_a2a pins multicast off too
    if not common.has_extension(mod):
        raise SystemExit(f"moe_a2a with its compiled extension is needed: {why or 'extension not built'}")
    if args.trace:
        from moe_a2a._ext import ext

        if not ext().profiler_compiled_in():
            raise SystemExit("--trace needs the in-kernel profiler: rebuild with MOE_A2A_PROFILE=1")
    ctx = common.init_benchmark()  # MOE_A2A_TEST_ONE_GPU=1: every rank on GPU 0, a smoke run
    if args.experts % ctx.world:
        raise SystemExit(f"--shape: {args.experts} experts cannot be split over {ctx.world} ranks")
    flusher = common.L2Flusher(ctx.device, args.flush_mib * common.MiB, args.preroll_us)

    def bench_case(case):
        T, counts = case
        rows = bench_tokens(ctx, args, T, counts, flusher)
        torch.cuda.empty_cache()  # the layer is freed: the floor's heap and the next T's layer come after it
        if args.floor:
            fields = layer_floor(ctx, rows)
            for r in rows:
                r.update(fields)
            if ctx.rank == 0:
                us = fields.get("floor_exchange_us")
                said = f"{us:.1f} us per d+c" if us is not None else fields["floor_exchange_status"]
                nbytes = fmt(rows[0].get("floor_exchange_bytes"), 0)
                print(f"  {case_of(rows[0])}: floor {said} ({nbytes} bytes each way)", flush=True)
        return rows

    rows = scaffold.run_cases(
        ctx,
        [(T, counts) for T in args.token_list for counts in args.count_list],
        bench_case,
        lambda case: (
            f"== E{args.experts}-K{args.topk}-H{args.hidden}-F{args.ffn} T={case[0]}/rank, counts {case[1]}, "
            f"{args.dtype} {args.layout}, world {ctx.world}"
            + (f", capacity {args.capacity}" if args.capacity else "")
            + (", weights at the experts" if args.weights_at_experts else "")
        ),
    )
    if ctx.rank == 0:
        print(
            "\ndevice time per call, max over ranks per iteration; TFLOP/s = the average rank's expert GEMMs / "
            "median time" + ("; router weights applied at the experts" if args.weights_at_experts else "")
        )
        common.print_table(HEADERS, table_rows(rows))
        print("\n" + MIRROR_LEGEND)
        common.print_table(MIRROR_HEADERS, mirror_rows(rows))
        for line in floor_notes(rows):
            print(line)
        scaffold.write_results(
            args.out, "bench_moe_layer", {"meta": common.metadata(ctx), "config": scaffold.settings(args), "rows": rows}
        )
    scaffold.finish()


if __name__ == "__main__":
    main()
