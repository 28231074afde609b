"""The multi-node exchange's network legs next to torch.distributed.all_to_all_single of the same
bytes, in the same run (issue 39; docs/design/multinode.md).

    torchrun --nproc-per-node=2 benchmarks/bench_multinode.py [--shapes ...] [--counts max;drawn]
             [--fp8 e4m3fn] [--node-capacity N] [--out DIR]

Every process is a node of one rank (MultiNodeAllToAll(ranks_per_node=1)): its in-node exchange
is LocalExchange (plain torch on its GPU) and every rank pair crosses the "network", here NCCL
between the GPUs of one machine (NVLink), so the legs' times are NCCL's on that fabric, not a
NIC's. Nodes of several ranks on one machine put two ranks on a GPU (the GPU tests do, for
correctness); their times would mean nothing, so this script has no such mode.

Per shape and counts spec (--counts as bench_graph.py's), all in one run, device times in us,
each the max over ranks, median and p10-p90 over iterations (eager: CUDA events, an L2 flush
and a GPU busy-wait before each, so the host queues the calls ahead) or over replays (graph):
  dispatch, combine  MultiNodeAllToAll.dispatch / .combine, eager (the whole path: the plan,
                     packing, the network leg, the in-node exchange; combine: the in-node combine,
                     the network leg, the sum of the nodes' partials)
  graph d+c          dispatch -> combine in one CUDA graph, per iteration (common.time_graph)
  leg d, leg c       the network legs alone, MultiNodeAllToAll.dispatch_leg on pack()'s tensors
                     (packed into one byte record per node and slot, one all_to_all_single,
                     unpacked as views) and combine_leg on [N, cap, H] partials (one
                     all_to_all_single); eager, and both in one graph ("graph legs")
  a2a d, a2a c       one all_to_all_single of uint8 over the same rail group moving the legs'
                     bytes per rank pair (equal splits); eager, and both in one graph
  load d, load c     all_to_all_single of only the rows the routing needs (host-known split
                     sizes: what a design that sends counts to the host first would move), eager

Bytes per ordered rank pair (self included: all_to_all_single moves every slice, its own as a
local copy), cap = node_capacity (default the shape's max tokens; the legs send the whole
capacity whatever the routing, so no count reaches the host and the legs fit in a graph):
    dispatch leg: cap x record                  record = up16(up4(row) + [scales] + K x 4 + K x 4): the row,
                                                H x token dtype bytes or with fp8 H bytes then ceil(H / 128)
                                                x 4 (fp32 scales), K int32 ids, K fp32 weights, each 4-byte
                                                field at a multiple of 4, padded to 16 (upN: rounded up to N)
    combine leg:  cap x H x token dtype bytes   (each node's partial sums, in the token dtype)
checked against the record the leg sends (MultiNodeAllToAll.dispatch_record). "load" moves count x
the same record bytes, count the rows a rank packs for a node (its tokens with an expert there).
The check column compares the combine of entry 0 (fake GEMM: x * (1 + rank)) with moe_a2a.reference.moe_reference.
Output: bench_multinode.json (meta + rows) and .csv under --out, and the tables printed.
"""

import math

import common  # noqa: F401  (first: pins NVLink multicast off before torch.distributed loads)
import scaffold
import torch
import torch.distributed as dist
from common import fmt, summarize

DEEPSEEK_V3 = "256,8,7168,1;256,8,7168,128;256,8,7168,1024;256,8,7168,4096"
DEFAULT_SHAPES = DEEPSEEK_V3 + ";" + common.CHALLENGE_SHAPES
# The dispatch record's fields (node_legs.dispatch_record): int32 ids (node-local, or -1), fp32
# weights, fp32 fp8 scales; each at a multiple of its size, the record padded to RECORD_ALIGN.
ID_BYTES, WEIGHT_BYTES, SCALE_BYTES, RECORD_ALIGN = 4, 4, 4, 16


def parse_args(argv=None):
    p = scaffold.parser(__doc__)
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help='"E,K,H,T[,dtype[,seed]];..." (T = max tokens per rank)')
    scaffold.add_counts(p)
    scaffold.add_fp8(p, "MultiNodeAllToAll(dispatch_dtype=)")
    p.add_argument(
        "--node-capacity", type=int, default=None, help="rows a rank sends each node (default: the shape's max tokens)"
    )
    p.add_argument("--inputs", type=int, default=8, help="distinct routings, cycled (>= 8: the graphs need them)")
    scaffold.add_iters(p, 20, "timed eager iterations per measurement")
    p.add_argument("--replays", type=int, default=10, help="timed graph replays (default 10)")
    p.add_argument("--no-graph", action="store_true", help="eager times only")
    p.add_argument("--no-check", action="store_true", help="skip the check against the reference")
    scaffold.add_out(p, "bench_multinode.json / .csv")
    args = p.parse_args(argv)
    scaffold.at_least(p, args, inputs=8)  # the graph must not replay one routing
    if args.node_capacity is not None and args.node_capacity < 1:
        p.error("--node-capacity must be >= 1")
    scaffold.shapes_and_counts(p, args, args.shapes)
    return args


# ----------------------------------------------------------------------------- bytes (pure)
def _round_up(n, to):
    return -(-n // to) * to


def dispatch_row_bytes(shape, fp8=False):
    """Bytes of one dispatch record (a row with its ids and weights, one per node and slot): the
    token (fp8: its bytes, then its scales), K ids, K weights, each 4-byte field at a multiple of
    4, the whole padded to RECORD_ALIGN bytes."""
    row = _round_up(shape.hidden * (1 if fp8 else shape.dtype.itemsize), SCALE_BYTES)
    if fp8:
        row += math.ceil(shape.hidden / 128) * SCALE_BYTES
    return _round_up(row + shape.topk * (ID_BYTES + WEIGHT_BYTES), RECORD_ALIGN)


def combine_row_bytes(shape):
    """Bytes of one partial sum on the combine leg (token dtype)."""
    return shape.hidden * shape.dtype.itemsize


def leg_pair_bytes(shape, cap, fp8=False):
    """(dispatch leg, combine leg) bytes per ordered rank pair: cap rows each."""
    return cap * dispatch_row_bytes(shape, fp8), cap * combine_row_bytes(shape)


def load_splits(counts, me, row_bytes):
    """(input, output) split sizes in bytes of the "load" all_to_all_single on rank `me` of a rail:
    counts[n][m] rows rank n packs for node m (0 for itself)."""
    return [c * row_bytes for c in counts[me]], [counts[n][me] * row_bytes for n in range(len(counts))]


# ----------------------------------------------------------------------------- measurements
def time_eager(ctx, fn, args, flusher, prepare=None, after=None):
    return summarize(common.time_device(ctx, fn, args.iters, 3, prepare=prepare, flusher=flusher, after=after))


def time_steps(ctx, step, args, per_graph):
    return summarize(common.time_graph(ctx, step, args.inputs, per_graph, args.replays))


def expert_output(d, dtype, rank):
    """The experts' stand-in: the fake GEMM x * (1 + rank) (fp8 rows dequantized first)."""
    from moe_a2a.reference import dequantize_fp8

    x = d.expert_x if d.expert_x_scale is None else dequantize_fp8(d.expert_x, d.expert_x_scale)
    return (x.float() * (1 + rank)).to(dtype)


def check(ctx, ep, shape, spec, fp8_dtype):
    """Relative error of entry 0's combine against the reference (fp8: on the dequantized inputs)."""
    from moe_a2a import reference as ref

    counts = common.spec_num_tokens(spec, ctx.world, shape.max_tokens) or [None] * ctx.world
    seed = common.pool_seed(shape, 0)
    inputs = [common.make_inputs(shape, r, ctx.world, seed, ctx.device, counts[r]) for r in range(ctx.world)]
    d = ep.dispatch(*inputs[ctx.rank])
    out = ep.combine(expert_output(d, shape.dtype, ctx.rank), d)
    try:
        ep.synchronize()
    except RuntimeError:  # rows over node_capacity (only on the ranks that had them): the error below says it
        pass
    if fp8_dtype is not None:
        deq = [ref.dequantize_fp8(*ref.quantize_fp8(i.x, fp8_dtype), shape.dtype) for i in inputs]
        inputs = [ref.Routing(x, i.topk_idx, i.topk_weights) for x, i in zip(deq, inputs)]
    want = ref.moe_reference(inputs, ctx.rank, shape.experts, ctx.world).float()
    err = ((out.float() - want).norm() / want.norm().clamp_min(1e-30)).item() if want.numel() else 0.0
    return common.max_over_ranks(ctx, [err])[0]


def load_baselines(ctx, ep, pool, shape, fp8, args, flusher):
    """The "load" all_to_all_singles (dispatch rows, combine partials) of each pool entry's real
    row counts, computed from every rank's routing (gathered by the pool), host-known splits.
    Returns ({"load_d": stats, "load_c": stats}, row fields: mean bytes per pair)."""
    from moe_a2a.node_legs import plan_rows

    N = ctx.world
    counts = [
        [plan_rows(idx, shape.experts, N, ep.node_capacity, n).count.tolist() for n, idx in enumerate(pool.routing(i))]
        for i in range(len(pool))
    ]
    times, fields = {}, {}
    for k, row_bytes in (("d", dispatch_row_bytes(shape, fp8)), ("c", combine_row_bytes(shape))):
        splits = [load_splits(c, ctx.rank, row_bytes) for c in counts]
        bufs = [[torch.zeros(sum(part), dtype=torch.uint8, device=ctx.device) for part in s] for s in splits]

        def load(i, splits=splits, bufs=bufs):
            (ins, outs), (inp, out) = splits[i % len(splits)], bufs[i % len(splits)]
            dist.all_to_all_single(out, inp, outs, ins, group=ep.rail_group)

        times[f"load_{k}"] = time_eager(ctx, load, args, flusher)
        fields[f"load_{k}_pair_bytes_mean"] = sum(sum(s[0]) for s in splits) / len(splits) / max(N - 1, 1)
    return times, fields


def bench_shape(ctx, shape, spec, args, flusher, fp8=None):
    from moe_a2a.multinode import MultiNodeAllToAll

    fp8_dtype = common.FP8_DTYPES.get(fp8)
    cap = args.node_capacity or shape.max_tokens
    N = ctx.world  # nodes of one rank
    num_tokens = common.spec_num_tokens(spec, ctx.world, shape.max_tokens)
    pool = common.InputPool(ctx, shape, args.inputs, num_tokens=num_tokens)
    ep = MultiNodeAllToAll(
        ctx.group,
        shape.experts,
        shape.topk,
        shape.hidden,
        shape.max_tokens,
        shape.dtype,
        ranks_per_node=1,
        node_capacity=cap,
        dispatch_dtype=fp8_dtype,
    )
    d_pair, c_pair = leg_pair_bytes(shape, cap, fp8_dtype is not None)
    row = {
        "shape": shape.label,
        "counts": spec,
        "rank_tokens_entry0": pool.counts[0],
        "world": ctx.world,
        "nodes": N,
        "ranks_per_node": 1,
        "node_capacity": cap,
        "dispatch_dtype": fp8 or str(shape.dtype)[6:],
        "dispatch_leg_pair_bytes": d_pair,
        "combine_leg_pair_bytes": c_pair,
    }
    if not args.no_check:
        row["check_rel_err"] = check(ctx, ep, shape, spec, fp8_dtype)

    def dispatch(i):
        return ep.dispatch(*pool.get(i))

    def experts(d):
        return expert_output(d, shape.dtype, ctx.rank)

    def dispatched(i):  # untimed before a timed combine
        d = dispatch(i)
        return d, experts(d)

    def round_trip(i):
        d = dispatch(i)
        return ep.combine(experts(d), d)

    def sends(i):  # pack()'s tensors of entry i, as dispatch makes them
        x, idx, w = pool.get(i)
        rows, scales = ep.send_rows(x)
        return ep.pack(rows, idx, w, scales)[1]

    sent = [sends(i) for i in range(len(pool))]
    record = ep.dispatch_record(sent[0]).size
    if cap * record != d_pair:  # the formula must be what the leg sends
        raise RuntimeError(f"{shape.label}: the dispatch leg sends {cap} x {record} bytes a pair, the formula {d_pair}")
    partials = torch.zeros(N, cap, shape.hidden, dtype=shape.dtype, device=ctx.device)
    a2a_in = {"d": torch.zeros(N * d_pair, dtype=torch.uint8, device=ctx.device)}
    a2a_in["c"] = torch.zeros(N * c_pair, dtype=torch.uint8, device=ctx.device)
    a2a_out = {k: torch.empty_like(t) for k, t in a2a_in.items()}

    def same_bytes(k):
        dist.all_to_all_single(a2a_out[k], a2a_in[k], group=ep.rail_group)

    times = {
        "dispatch": time_eager(ctx, dispatch, args, flusher, after=lambda d: ep.combine(experts(d), d)),
        "combine": time_eager(ctx, lambda dy: ep.combine(dy[1], dy[0]), args, flusher, prepare=dispatched),
        "leg_d": time_eager(ctx, lambda i: ep.dispatch_leg(sent[i % len(sent)]), args, flusher),
        "leg_c": time_eager(ctx, lambda i: ep.combine_leg(partials), args, flusher),
        "a2a_d": time_eager(ctx, lambda i: same_bytes("d"), args, flusher),
        "a2a_c": time_eager(ctx, lambda i: same_bytes("c"), args, flusher),
    }
    load_times, load_fields = load_baselines(ctx, ep, pool, shape, fp8_dtype is not None, args, flusher)
    times.update(load_times)
    row.update(load_fields)
    if not args.no_graph:
        largest = max(max(c) for c in pool.counts)
        per_graph = 8 * args.inputs if largest <= 256 else args.inputs
        times["graph_dc"] = time_steps(ctx, round_trip, args, per_graph)
        times["graph_legs"] = time_steps(
            ctx, lambda i: (ep.dispatch_leg(sent[i]), ep.combine_leg(partials)), args, per_graph
        )
        times["graph_a2a"] = time_steps(ctx, lambda i: (same_bytes("d"), same_bytes("c")), args, per_graph)
    try:
        ep.synchronize()  # raises on the ranks that had more rows for a node than node_capacity
        over = 0.0
    except RuntimeError:
        over = 1.0
    if common.max_over_ranks(ctx, [over])[0]:
        row["error"] = f"rows over node_capacity={cap} were dropped: the times are not the routing's"
    ep.close()
    for name, st in times.items():
        row.update({f"{name}_us_median": st["median"], f"{name}_us_p10": st["p10"], f"{name}_us_p90": st["p90"]})
    for leg, base in (("leg_d", "a2a_d"), ("leg_c", "a2a_c"), ("graph_legs", "graph_a2a")):
        if leg in times:
            row[f"{leg}_x_{base}"] = times[leg]["median"] / times[base]["median"]
    return row


def spread(row, name):
    """ "median (p10-p90)" of a measurement, or "-"."""
    if f"{name}_us_median" not in row:
        return "-"
    return "{} ({}-{})".format(*(fmt(row[f"{name}_us_{q}"]) for q in ("median", "p10", "p90")))


def label(row):
    return row["shape"] if row["counts"] == "max" else f"{row['shape']} {row['counts']}"


def median(name, digits=1):
    return lambda r: fmt(r.get(f"{name}_us_median"), digits)


# The two printed tables: (header, cell of a row). First the legs against all_to_all_single of
# their bytes ("x": leg / a2a, medians), then the whole calls.
LEG_COLUMNS = [
    ("shape", label),
    ("dispatch", lambda r: r["dispatch_dtype"]),
    ("d KB/pair", lambda r: fmt(r["dispatch_leg_pair_bytes"] / 1e3)),
    ("leg d", median("leg_d")),
    ("a2a d", median("a2a_d")),
    ("x", lambda r: fmt(r["leg_d_x_a2a_d"], 2)),
    ("c KB/pair", lambda r: fmt(r["combine_leg_pair_bytes"] / 1e3)),
    ("leg c", median("leg_c")),
    ("a2a c", median("a2a_c")),
    ("x", lambda r: fmt(r["leg_c_x_a2a_c"], 2)),
    ("graph legs", median("graph_legs")),
    ("graph a2a", median("graph_a2a")),
    ("x", lambda r: fmt(r.get("graph_legs_x_graph_a2a"), 2)),
    ("load d", median("load_d")),
    ("load c", median("load_c")),
]
CALL_COLUMNS = [
    ("shape", label),
    ("dispatch", lambda r: r["dispatch_dtype"]),
    ("tokens (entry 0)", lambda r: "/".join(str(t) for t in r["rank_tokens_entry0"])),
    ("cap", lambda r: str(r["node_capacity"])),
    ("eager dispatch", lambda r: spread(r, "dispatch")),
    ("eager combine", lambda r: spread(r, "combine")),
    ("graph d+c", lambda r: spread(r, "graph_dc")),
    ("check", lambda r: fmt(r.get("check_rel_err"), 4)),
]


def print_tables(rows):
    for i, columns in enumerate((LEG_COLUMNS, CALL_COLUMNS)):
        print("\n" if i else "", end="")
        common.print_table([h for h, _ in columns], [[cell(r) for _, cell in columns] for r in rows])


def main():
    args = parse_args()
    ctx = common.init_benchmark()
    if ctx.one_gpu:
        raise SystemExit(f"{common.ONE_GPU_ENV}=1: the rail groups need NCCL, a GPU per rank")
    flusher = common.L2Flusher(ctx.device, preroll_us=1000.0)
    runs = scaffold.shape_runs(args)
    save = scaffold.partial_saver(ctx, args, "bench_multinode")

    def after(rows, new):
        save(rows, complete=False)
        r = new[0]
        print(
            f"{label(r):28s} {r['dispatch_dtype']:8s} leg d {fmt(r['leg_d_us_median'])} us = "
            f"x{fmt(r['leg_d_x_a2a_d'], 2)} a2a; leg c {fmt(r['leg_c_us_median'])} us = "
            f"x{fmt(r['leg_c_x_a2a_c'], 2)} a2a; dispatch {spread(r, 'dispatch')}, combine "
            f"{spread(r, 'combine')}, graph d+c {spread(r, 'graph_dc')}; check {fmt(r.get('check_rel_err'), 4)}"
            + (f"; ERROR {r['error']}" if "error" in r else ""),
            flush=True,
        )

    rows = scaffold.run_cases(
        ctx, runs, lambda run: [bench_shape(ctx, run[0], run[1], args, flusher, run[2])], after=after
    )
    if ctx.rank == 0:
        print()
        print_tables(rows)
        save(rows, complete=True)
    scaffold.finish()


if __name__ == "__main__":
    main()
