"""Microbenchmarks behind the speed of light: peer store bandwidth B, flag latency, launch cost.

    torchrun --nproc-per-node=2 benchmarks/microbench.py [--out DIR]

Importable: run(ctx) -> dict, collective. B and L are measured in the same process as the
benchmark that uses them: ratios hold across noisy machines, absolute times do not.
"""
import common  # noqa: F401  (first: pins multicast off before torch.distributed)
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

from common import MiB, has_extension, import_moe_a2a, moe_submodule, summarize, time_device

# Used only when a quantity cannot be measured here; always labelled "assumed" in the output.
ASSUMED = {"B_GBps": 370.0, "flag_latency_us": 1.2, "B_local_GBps": 4160.0,
           "source": "BENCHMARKS.md (B, flag latency, 2026-11-22) and B_local of the 2026-11-23 run, 2 x H200 NV18"}


class _PeerBuffers:
    """This rank's symmetric buffer and a view of the next rank's one (ring: every GPU stores
    to one peer while another stores into it, as in an all-to-all).

    moe_a2a.SymmetricHeap when the extension is built; else (or if that fails) torch
    symmetric memory's get_buffer, so the suite still has a B without the extension."""

    def __init__(self, ctx, nbytes):
        n = nbytes // 4
        self.peer_rank = (ctx.rank + 1) % ctx.world
        self.heap = self._keep = None
        self.notes = []
        mod, _ = import_moe_a2a()
        if has_extension(mod):
            try:
                self.heap = mod.SymmetricHeap(ctx.group, nbytes + MiB)  # slack: alignment
                self.local = self.heap.alloc((n,), torch.int32)
                self.peer = self.heap.peer(self.local, self.peer_rank)
                self.method = "moe_a2a.SymmetricHeap"
                return
            except Exception as e:  # same on every rank: the calls above are collective
                self.notes.append(f"moe_a2a heap failed ({type(e).__name__}: {e})")
                self.close()
        import torch.distributed._symmetric_memory as symm
        from baselines import use_nvshmem_backend
        if symm.is_nvshmem_available():
            # the backend is fixed per process by the first allocation, and the symm_mem
            # system needs NVSHMEM later in the same run
            use_nvshmem_backend(ctx.device)
        self.local = symm.empty(n, dtype=torch.int32, device=ctx.device)
        self._keep = symm.rendezvous(self.local, ctx.group.group_name)
        self.peer = self._keep.get_buffer(self.peer_rank, (n,), torch.int32)
        self.method = "torch symm_mem get_buffer (fallback)"

    def close(self):
        if self.heap is not None:
            self.heap.close()
            self.heap = None


def _gbps(nbytes, us_list):
    s = summarize(us_list)
    return {"GBps": nbytes / (s["median"] * 1e3), "us": s}


def _bandwidth(ctx, op, nbytes, iters, warmup, active=True):
    """GB/s of one GPU's stores: op() timed with events, max over ranks per iteration.
    Ranks that are not active still join the per-iteration alignment (it is collective)."""
    us = time_device(ctx, lambda i: op() if active else None, iters, warmup)
    return _gbps(nbytes, us)


def peer_bandwidth(ctx, sizes_mib=(64, 256), iters=20, warmup=3):
    bufs = _PeerBuffers(ctx, max(sizes_mib) * MiB)
    src = torch.randint(-2**31, 2**31 - 1, bufs.local.shape, dtype=torch.int32,
                        device=ctx.device)
    scratch = torch.empty_like(src)
    res = {"method": bufs.method, "sizes_mib": list(sizes_mib), "notes": bufs.notes}
    # SM-driven store: an elementwise kernel whose output is the peer's memory. Plain
    # copy_() of same-dtype contiguous tensors becomes cudaMemcpyAsync (copy engine).
    sm_ok = bufs.peer.device == src.device
    if not sm_ok:
        res["sm_note"] = f"peer view is on {bufs.peer.device}: SM-driven store not measured"
    for mib in sizes_mib:
        n = mib * MiB // 4
        s, d, loc, scr = src[:n], bufs.peer[:n], bufs.local[:n], scratch[:n]
        r = {}
        if sm_ok:
            r["peer_store_sm_bidir"] = _bandwidth(
                ctx, lambda: torch.bitwise_or(s, 0, out=d), mib * MiB, iters, warmup)
            r["peer_store_sm_uni"] = _bandwidth(  # rank 0 -> 1 alone: the link, not the mix
                ctx, lambda: torch.bitwise_or(s, 0, out=d), mib * MiB, iters, warmup,
                active=ctx.rank == 0)
        r["peer_copy_ce_bidir"] = _bandwidth(ctx, lambda: d.copy_(s), mib * MiB, iters, warmup)
        # local device-to-device copies give the scale (bytes stored, not read + written)
        r["local_store_sm"] = _bandwidth(
            ctx, lambda: torch.bitwise_or(s, 0, out=scr), mib * MiB, iters, warmup)
        r["local_copy_ce"] = _bandwidth(ctx, lambda: loc.copy_(s), mib * MiB, iters, warmup)
        res[f"{mib}MiB"] = r
    return res, bufs


def flag_latency(ctx, iters=1000):
    """moe_a2a.microbench.flag_latency_us on a small heap of its own, or None."""
    mod, _ = import_moe_a2a()
    mb = moe_submodule("microbench")
    if not has_extension(mod) or not hasattr(mb, "flag_latency_us"):
        return None
    heap = mod.SymmetricHeap(ctx.group, 4 * MiB)
    try:
        return float(mb.flag_latency_us(heap, iters=iters))
    finally:
        heap.close()


def launch_cost(ctx, n=1000, repeats=5):
    """Per-launch cost of a tiny kernel: eager (device timeline, bounded by host submission)
    and inside a CUDA graph (what one more kernel costs the GPU)."""
    x = torch.zeros(1, device=ctx.device)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def eager():
        for _ in range(n):
            x.add_(0)

    eager()
    torch.cuda.synchronize()
    dev, host = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        s.record()
        eager()
        e.record()
        e.synchronize()
        host.append((time.perf_counter() - t0) * 1e6 / n)
        dev.append(s.elapsed_time(e) * 1e3 / n)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        eager()
    g.replay()
    torch.cuda.synchronize()
    graph = []
    for _ in range(repeats):
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        graph.append(s.elapsed_time(e) * 1e3 / n)
    del g
    return {"eager_device_us": summarize(dev)["median"], "eager_host_us": summarize(host)["median"],
            "graph_us": summarize(graph)["median"]}


def run(ctx, sizes_mib=(64, 256), iters=20, flag_iters=1000):
    """Collective. Returns the measurements plus B_GBps and L_us for the speed of light:
    B = SM-driven peer store bandwidth with every GPU storing at once (largest size);
    L = one-way flag latency + one kernel launch inside a graph (a lower bound on launch)."""
    out = {}
    try:
        bw, bufs = peer_bandwidth(ctx, sizes_mib, iters)
        bufs.close()
        out["bandwidth"] = bw
    except Exception as e:  # no peer access, no symmetric memory...
        out["bandwidth"] = {"error": f"{type(e).__name__}: {e}"}
    flag = None
    try:
        flag = flag_latency(ctx, flag_iters)
    except Exception as e:
        out["flag_error"] = f"{type(e).__name__}: {e}"
    out["launch"] = launch_cost(ctx)
    big = out["bandwidth"].get(f"{max(sizes_mib)}MiB", {})
    key = "peer_store_sm_bidir" if "peer_store_sm_bidir" in big else "peer_copy_ce_bidir"
    if key in big:
        out["B_GBps"], out["B_source"] = big[key]["GBps"], f"measured: {key}, {max(sizes_mib)} MiB"
    else:
        out["B_GBps"], out["B_source"] = ASSUMED["B_GBps"], "assumed: " + ASSUMED["source"]
    if flag is not None:
        out["flag_latency_us"], out["flag_source"] = flag, "measured: moe_a2a.microbench"
    else:
        out["flag_latency_us"] = ASSUMED["flag_latency_us"]
        out["flag_source"] = "assumed: " + ASSUMED["source"]
    out["L_us"] = out["flag_latency_us"] + out["launch"]["graph_us"]
    # The local-memory term of the bound (moe_a2a.sol.phase_bound_us) counts bytes read +
    # written; a device copy of n bytes moves 2n.
    if "local_copy_ce" in big:
        out["B_local_GBps"] = 2 * big["local_copy_ce"]["GBps"]
        out["B_local_source"] = f"measured: 2 x local_copy_ce, {max(sizes_mib)} MiB"
    else:
        out["B_local_GBps"], out["B_local_source"] = ASSUMED["B_local_GBps"], "assumed: " + ASSUMED["source"]
    return out


def print_summary(m):
    print(f"microbench ({m['bandwidth'].get('method', 'n/a')}):")
    for k, v in m["bandwidth"].items():
        if isinstance(v, dict) and k.endswith("MiB"):
            print(f"  {k}: " + ", ".join(f"{n} {r['GBps']:.0f} GB/s" for n, r in v.items()))
    if "error" in m["bandwidth"]:
        print(f"  bandwidth not measured: {m['bandwidth']['error']}")
    for n in m["bandwidth"].get("notes", []) + ([m["flag_error"]] if "flag_error" in m else []):
        print(f"  note: {n}")
    lc = m["launch"]
    print(f"  launch: eager {lc['eager_device_us']:.2f} us (host {lc['eager_host_us']:.2f}), "
          f"graph {lc['graph_us']:.2f} us")
    print(f"  flag latency {m['flag_latency_us']:.2f} us ({m['flag_source']})")
    print(f"  => B = {m['B_GBps']:.0f} GB/s ({m['B_source']}); L = {m['L_us']:.2f} us; "
          f"B_local = {m['B_local_GBps']:.0f} GB/s read + written ({m['B_local_source']})")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes-mib", default="64,256", help="peer copy sizes in MiB (default 64,256)")
    p.add_argument("--iters", type=int, default=20, help="timed copies per size (default 20)")
    p.add_argument("--flag-iters", type=int, default=1000)
    p.add_argument("--out", default=os.path.join(common.BENCH_DIR, "results"),
                   help="folder for microbench.json (default benchmarks/results)")
    args = p.parse_args(argv)
    ctx = common.init_distributed()
    m = run(ctx, tuple(int(v) for v in args.sizes_mib.split(",")), args.iters, args.flag_iters)
    if ctx.rank == 0:
        print_summary(m)
        path = os.path.join(args.out, "microbench.json")
        common.write_json(path, {"meta": common.metadata(ctx), "microbench": m})
        print(f"wrote {path}")
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
