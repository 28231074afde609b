"""Host time of dispatch/combine next to torch floor ops, interleaved in every iteration (the ad-hoc probe of this
results folder, kept as it ran: it imports benchmarks/common.py and baselines.py)."""
import argparse, os, sys, time, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "benchmarks"))
import common  # noqa
import torch
import torch.distributed as dist
from baselines import MoeA2ASystem

p = argparse.ArgumentParser()
p.add_argument("--num-sms", type=int, default=None)
p.add_argument("--no-microbench", action="store_true")
p.add_argument("--out", default="/tmp")
p.add_argument("--iters", type=int, default=600)
args = p.parse_args()
ctx = common.init_benchmark()
shape = common.parse_shapes("256,8,7168,1")[0]
system = MoeA2ASystem(ctx, shape, layout="packed", num_sms=args.num_sms)
ep = system.ep
pool = common.InputPool(ctx, shape, 8)
ops = torch.ops.moe_a2a
E, S = ep._engine, ep._state
a16 = torch.randn(16, device=ctx.device)
dev = ctx.device
us = {}
def t(name, fn, *a):
    t0 = time.perf_counter(); r = fn(*a); dt = (time.perf_counter() - t0) * 1e6
    us.setdefault(name, []).append(dt); return r
def empties():
    for _ in range(10): torch.empty(1024, device=dev)
for i in range(100 + args.iters):
    x, idx, w = pool.get(i)
    t("10 x torch.empty", empties)
    t("torch.add", torch.add, a16, a16)
    *out, dm = t("op dispatch", ops.dispatch, E, S, x, None, idx, w)
    t("op combine", ops.combine, E, S, out[0], out[5], out[6], out[7], out[8], dm)
    d = t("ep.dispatch", ep.dispatch, x, idx, w)
    t("ep.combine", ep.combine, d.expert_x, d)
    if (i + 1) % 8 == 0:
        torch.cuda.synchronize()
    if i == 99:
        us = {}
torch.cuda.synchronize()
names = sorted(us)
vals = common.max_over_ranks(ctx, [us[n] for n in names])
if ctx.rank == 0:
    v = dict(zip(names, vals))
    for n in names:
        s = common.summarize(v[n])
        ratio = statistics.median(a / b for a, b in zip(v[n], v["10 x torch.empty"]))
        print(f"{n:20s} {s['median']:7.1f} us ({s['p10']:.1f}-{s['p90']:.1f})   per-iteration ratio to 10 x torch.empty: {ratio:.3f}")
system.close()
dist.destroy_process_group()
