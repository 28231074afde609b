"""Host time of moe_a2a's calls: what a program that does not capture CUDA graphs pays on the CPU
for each call, next to one plain torch op on the same machine.

    torchrun --nproc-per-node=<N> benchmarks/bench_host.py [--shapes ...] [--iters 300] [--out DIR]

Eager device time (bench_graph.py, bench_all2all.py) queues the host ahead of the GPU and leaves
the host out. Training steps and transformers' generate() run eagerly and pay it on every MoE
layer; at a few tokens it is more than the kernels take. Each call is timed by the host's clock
around that call alone, in steady state: the calls of an iteration run back to back with no
synchronisation between them, as a user's would, and every --sync-every iterations the GPU is
waited for outside the timed calls, so its queue never fills and no call waits for the GPU.
Per call: the max over ranks of each iteration, then median and p10-p90 over iterations.

Hosts drift: a shared VM's speed can move by 2x between two sequences of one run. So every
iteration of every sequence also times one torch.add first (REFERENCE), and the column
"x add" is the median over iterations of (call / that iteration's torch.add): a number in units
of the same moment's host speed, the one to compare between runs, trees or machines.

Sequences (one round each; inputs cycle through --inputs routings):
  forward   dispatch, combine (no autograd)
  split     dispatch_send, dispatch_recv, combine_send, combine_recv
  training  dispatch and combine with x and topk_weights requiring grad, then backward from a
            given gradient of the output; the experts are the identity, so backward is combine's
            and dispatch's backward rounds and autograd's own work
  floor     torch.add of two 16-element tensors (one op, one kernel launch), torch.empty
"""

import time

import common  # noqa: F401  (first: pins NVLink multicast off before torch.distributed loads)
import scaffold
import torch
from baselines import MoeA2ASystem
from common import fmt, summarize

DEFAULT_SHAPES = "256,8,7168,1;256,8,7168,128"
SEQUENCES = {
    "forward": ("dispatch", "combine"),
    "split": ("dispatch_send", "dispatch_recv", "combine_send", "combine_recv"),
    "training": ("dispatch (grad)", "combine (grad)", "backward"),
    "floor": ("torch.add", "torch.empty"),
}
REFERENCE = "torch.add (same iteration)"


def parse_args(argv=None):
    p = scaffold.parser(__doc__)
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help='"E,K,H,T[,dtype[,seed]];..." (T = tokens per rank)')
    scaffold.add_layout(p, "packed")
    scaffold.add_iters(p, 300, "timed iterations of each sequence (>= 50)")
    scaffold.add_warmup(p, 30)
    p.add_argument("--inputs", type=int, default=8, help="distinct routings cycled through (default 8)")
    p.add_argument("--sync-every", type=int, default=8, help="iterations between two waits for the GPU (default 8)")
    scaffold.add_no_microbench(p, "accepted for tools/mps_proxy.sh; nothing to skip")
    common.add_num_sms_arg(p)
    scaffold.add_out(p, "bench_host.json / .csv")
    args = p.parse_args(argv)
    scaffold.at_least(p, args, iters=50, sync_every=1, inputs=1)  # a median over at least 50 iterations
    return args


class Clock:
    """Host microseconds of each named call, one list per name, iteration by iteration."""

    def __init__(self):
        self.us = {}

    def __call__(self, name, fn, *a):
        t0 = time.perf_counter()
        r = fn(*a)
        self.us.setdefault(name, []).append((time.perf_counter() - t0) * 1e6)
        return r


def run_sequence(name, ep, pool, args, ctx):
    """{call: [host us per timed iteration]} of sequence `name` on this rank."""
    clock = Clock()
    grad_out = None
    a = torch.randn(16, device=ctx.device)

    def forward(x, idx, w):
        d = clock("dispatch", ep.dispatch, x, idx, w)
        clock("combine", ep.combine, d.expert_x, d)

    def split(x, idx, w):
        d = clock("dispatch_recv", ep.dispatch_recv, clock("dispatch_send", ep.dispatch_send, x, idx, w))
        clock("combine_recv", ep.combine_recv, clock("combine_send", ep.combine_send, d.expert_x, d))

    def training(x, idx, w):
        nonlocal grad_out
        x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
        d = clock("dispatch (grad)", ep.dispatch, x, idx, w)
        out = clock("combine (grad)", ep.combine, d.expert_x, d)
        if grad_out is None or grad_out.shape != out.shape:
            grad_out = torch.ones_like(out)
        clock("backward", out.backward, grad_out)

    def floor(*_):
        clock("torch.add", torch.add, a, a)
        clock("torch.empty", lambda: torch.empty(1024, device=ctx.device))

    step = {"forward": forward, "split": split, "training": training, "floor": floor}[name]
    for i in range(args.warmup + args.iters):
        if i == args.warmup:
            torch.cuda.synchronize()
            clock.us.clear()
        clock(REFERENCE, torch.add, a, a)
        step(*pool.get(i))
        if (i + 1) % args.sync_every == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return clock.us


def max_per_iteration(ctx, us):
    """Per call, the max over ranks of each iteration (the ranks ran the same iterations)."""
    names = sorted(us)
    return dict(zip(names, common.max_over_ranks(ctx, [us[n] for n in names])))


def bench_shape(ctx, shape, args):
    system = MoeA2ASystem(ctx, shape, layout=args.layout, num_sms=args.num_sms, send_sms=args.send_sms)
    rows = []
    try:
        pool = common.InputPool(ctx, shape, args.inputs)
        for seq, calls in SEQUENCES.items():
            us = max_per_iteration(ctx, run_sequence(seq, system.ep, pool, args, ctx))
            us["sum"] = [sum(vals) for vals in zip(*(us[c] for c in calls))]
            for call in (*calls, "sum"):
                s = summarize(us[call])
                per_add = common.quantile([c / r for c, r in zip(us[call], us[REFERENCE])], 0.5)
                rows.append({"shape": shape.label, "sequence": seq, "call": call, **s, "per_add": per_add})
    finally:
        system.close()
    return rows


def main(argv=None):
    args = parse_args(argv)
    ctx = common.init_benchmark()
    rows = scaffold.run_cases(ctx, common.parse_shapes(args.shapes), lambda shape: bench_shape(ctx, shape, args))
    if ctx.rank == 0:
        print(f"host us per call, max over {ctx.world} ranks per iteration, median (p10-p90) of {args.iters}")
        print('"x add": median over iterations of (call / a torch.add timed in the same iteration)')
        spread = [f"{fmt(r['p10'])}-{fmt(r['p90'])}" for r in rows]
        table = [
            [r["shape"], r["sequence"], r["call"], fmt(r["median"]), s, f"{r['per_add']:.2f}"]
            for r, s in zip(rows, spread)
        ]
        common.print_table(["shape", "sequence", "call", "median", "p10-p90", "x add"], table)
        scaffold.write_results(args.out, "bench_host", {"meta": common.metadata(ctx), "rows": rows}, say=False)
    scaffold.finish()


if __name__ == "__main__":
    main()
