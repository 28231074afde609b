"""Microbenchmarks behind the speed of light and the machine's floor: peer store bandwidth B,
local copy bandwidth B_hbm, flag latency, launch cost, and the bare-exchange floor.

    torchrun --nproc-per-node=2 benchmarks/microbench.py [--out DIR] [--no-floor]

Importable: run(ctx) -> dict, collective. B, B_hbm and L are measured in the same process as
the benchmark that uses them: ratios hold across noisy machines, absolute times do not.
The floor (moe_a2a.microbench.floor_us, csrc/heap/floor_exchange.h): one bare exchange kernel
per phase, two phases per iteration, CUDA-graph steady state, us per 2 phases (median over
replays of the max over ranks); each rank sends `bytes` to the next rank (at world 2: both
GPUs send `bytes` each way) with `blocks` blocks, one signal per block.
"""

import os
import sys
import time

import common  # noqa: F401  (first: pins multicast off before torch.distributed)
import scaffold
import torch
from common import MiB, has_extension, import_moe_a2a, moe_submodule, summarize, time_device

# Used only when a quantity cannot be measured here; always labelled "assumed" in the output.
ASSUMED = {
    "B_GBps": 370.0,
    "flag_latency_us": 1.2,
    "B_hbm_GBps": 4137.0,
    "source": "BENCHMARKS.md (B, flag latency, 2026-11-22) and the local copy of the 2026-11-23 run, 2 x H200 NV18",
}

# The floor table of the summary: bytes each way per phase (the challenge's E8-K2-H6144-T16 and
# DeepSeek-V3 at 128 / 256 / 1024 tokens, world 2), and the block counts for 0 bytes.
FLOOR_SIZES = (("0", 0), ("196 KB", 196_608), ("1.8 MB", 1_835_008), ("3.7 MB", 3_670_016), ("14.7 MB", 14_680_064))
FLOOR_ZERO_BLOCKS = (8, 32, 132)
FLOOR_BLOCKS = (32, 132)  # tried for a size > 0 (capped at the SM count); the floor is the best


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
    src = torch.randint(-(2**31), 2**31 - 1, bufs.local.shape, dtype=torch.int32, device=ctx.device)
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
            r["peer_store_sm_bidir"] = _bandwidth(ctx, lambda: torch.bitwise_or(s, 0, out=d), mib * MiB, iters, warmup)
            r["peer_store_sm_uni"] = _bandwidth(  # rank 0 -> 1 alone: the link, not the mix
                ctx, lambda: torch.bitwise_or(s, 0, out=d), mib * MiB, iters, warmup, active=ctx.rank == 0
            )
        r["peer_copy_ce_bidir"] = _bandwidth(ctx, lambda: d.copy_(s), mib * MiB, iters, warmup)
        # local device-to-device copies give the scale (bytes stored, not read + written)
        r["local_store_sm"] = _bandwidth(ctx, lambda: torch.bitwise_or(s, 0, out=scr), mib * MiB, iters, warmup)
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
    return {
        "eager_device_us": summarize(dev)["median"],
        "eager_host_us": summarize(host)["median"],
        "graph_us": summarize(graph)["median"],
    }


def hbm_copy(ctx, mib=256, iters=20, warmup=3):
    """Device-to-device copy bandwidth of one GPU: dst.copy_(src) of `mib` MiB between two plain
    torch tensors, timed with events on every GPU at once (max over ranks per iteration).
    GBps counts bytes read + written (2 x the size), as moe_a2a.sol's local term does."""
    n = mib * MiB
    src = torch.empty(n // 4, dtype=torch.int32, device=ctx.device).random_()
    dst = torch.empty_like(src)
    us = time_device(ctx, lambda i: dst.copy_(src), iters, warmup)
    r = _gbps(2 * n, us)
    r["mib"] = mib
    return r


def sm_count(ctx):
    return torch.cuda.get_device_properties(ctx.device).multi_processor_count


def _floor_heap(ctx, max_bytes, max_blocks):
    """(moe_a2a module, microbench module, heap or None, why). Collective."""
    mod, why = import_moe_a2a()
    mb = moe_submodule("microbench")
    if not has_extension(mod) or not hasattr(mb, "floor_us"):
        return mod, mb, None, why or "moe_a2a extension not built"
    heap = mod.SymmetricHeap(ctx.group, mb.floor_bytes_needed(max_bytes, max_blocks) + MiB)
    mb.floor_reserve(heap, max_bytes, max_blocks)
    return mod, mb, heap, ""


def _floor_point(ctx, mb, heap, nbytes, blocks, iters_per_graph, replays):
    s = summarize(mb.floor_times_us(heap, nbytes, blocks, iters_per_graph, replays))
    return {"bytes": nbytes, "blocks": blocks, "us_median": s["median"], "us_p10": s["p10"], "us_p90": s["p90"]}


def floor_table(
    ctx, sizes=FLOOR_SIZES, zero_blocks=FLOOR_ZERO_BLOCKS, blocks=FLOOR_BLOCKS, iters_per_graph=100, replays=20
):
    """Collective. The floor for each (label, bytes) of `sizes`: 0 bytes at every count of
    zero_blocks, other sizes at every count of `blocks` (counts capped at the SM count).
    Returns {"points": [{label, bytes, blocks, us_median, us_p10, us_p90}], "error": ...}."""
    n_sm = sm_count(ctx)
    cap = lambda bs: sorted({min(b, n_sm) for b in bs})  # noqa: E731
    max_bytes = max(b for _, b in sizes)
    _, mb, heap, why = _floor_heap(ctx, max_bytes, n_sm)
    if heap is None:
        return {"points": [], "error": why}
    points = []
    try:
        for label, nbytes in sizes:
            for b in cap(zero_blocks if nbytes == 0 else blocks):
                points.append(dict(_floor_point(ctx, mb, heap, nbytes, b, iters_per_graph, replays), label=label))
    except Exception as e:  # the same on every rank: checks and timeouts are agreed collectively
        return {"points": points, "error": f"{type(e).__name__}: {e}"}
    finally:
        heap.close()
    return {"points": points}


def floor_for_bytes(ctx, nbytes, blocks=FLOOR_BLOCKS, iters_per_graph=100, replays=20):
    """Collective. The machine's floor for dispatch + combine moving `nbytes` each way per phase:
    the best (lowest median) over the block counts tried, with every count's numbers.
    Returns {"bytes", "us" (median), "us_p10", "us_p90", "blocks", "by_blocks"} or {"error": ...}."""
    n_sm = sm_count(ctx)
    counts = sorted({min(b, n_sm) for b in blocks})
    _, mb, heap, why = _floor_heap(ctx, nbytes, max(counts))
    if heap is None:
        return {"bytes": nbytes, "error": why}
    try:
        pts = [_floor_point(ctx, mb, heap, nbytes, b, iters_per_graph, replays) for b in counts]
    except Exception as e:
        return {"bytes": nbytes, "error": f"{type(e).__name__}: {e}"}
    finally:
        heap.close()
    best = min(pts, key=lambda p: p["us_median"])
    return {
        "bytes": nbytes,
        "us": best["us_median"],
        "us_p10": best["us_p10"],
        "us_p90": best["us_p90"],
        "blocks": best["blocks"],
        "by_blocks": {p["blocks"]: p["us_median"] for p in pts},
    }


def floor_bytes(dispatch_bytes, combine_bytes):
    """The bytes each way of one phase of the floor for a pool of routings: per entry the busiest
    GPU's bytes of dispatch and of combine (moe_a2a.sol.PhaseBytes.busiest; with fp8 dispatch the
    two differ: their mean, so the floor's two phases move what ours do), median over the entries."""
    return int(summarize([(d + c) / 2 for d, c in zip(dispatch_bytes, combine_bytes)])["median"])


def routes_floor_bytes(routings, experts, world, hidden, elem_bytes, dispatch_dtype=None):
    """floor_bytes of a pool given every rank's expert ids: routings[j][r] is rank r's [T_r, K]
    topk ids of entry j (common.gather_rows), experts owned in contiguous blocks (moe_a2a.sol)."""
    sol = common.sol_model()
    d, c = zip(*(sol.phase_bytes(r, experts, world, hidden, elem_bytes, dispatch_dtype) for r in routings))
    return floor_bytes([p.busiest for p in d], [p.busiest for p in c])


def floor_fields(floor):
    """A row's fields for a floor_for_bytes result: floor_exchange_us / _blocks / _bytes, or
    floor_exchange_status with the error that stopped it."""
    if "error" in floor:
        return {"floor_exchange_status": floor["error"]}
    return {
        "floor_exchange_us": floor["us"],
        "floor_exchange_blocks": floor["blocks"],
        "floor_exchange_bytes": floor["bytes"],
    }


def run(ctx, sizes_mib=(64, 256), iters=20, flag_iters=1000, floor=True, hbm_mib=256):
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
    # The local-memory term of the bound (moe_a2a.sol.phase_bound_us): bytes read + written.
    try:
        out["hbm_copy"] = hbm_copy(ctx, hbm_mib, iters)
        torch.cuda.empty_cache()  # its two buffers are free now
        out["B_hbm_GBps"] = out["hbm_copy"]["GBps"]
        out["B_hbm_source"] = f"measured: torch copy_ of {hbm_mib} MiB, read + written"
    except Exception as e:
        out["hbm_error"] = f"{type(e).__name__}: {e}"
        out["B_hbm_GBps"], out["B_hbm_source"] = ASSUMED["B_hbm_GBps"], "assumed: " + ASSUMED["source"]
    if floor:
        try:
            out["floor"] = floor_table(ctx)
        except Exception as e:
            out["floor"] = {"points": [], "error": f"{type(e).__name__}: {e}"}
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
    print(
        f"  launch: eager {lc['eager_device_us']:.2f} us (host {lc['eager_host_us']:.2f}), "
        f"graph {lc['graph_us']:.2f} us"
    )
    print(f"  flag latency {m['flag_latency_us']:.2f} us ({m['flag_source']})")
    if "hbm_error" in m:
        print(f"  note: local copy not measured: {m['hbm_error']}")
    print(
        f"  => B = {m['B_GBps']:.0f} GB/s ({m['B_source']}); L = {m['L_us']:.2f} us; "
        f"B_hbm = {m['B_hbm_GBps']:.0f} GB/s read + written ({m['B_hbm_source']})"
    )
    fl = m.get("floor")
    if fl is not None:
        print(
            "  floor (bare exchange, one kernel per phase, graph steady state; us per 2 phases, "
            "median over replays of the max over ranks):"
        )
        for p in fl.get("points", []):
            gbps = 2 * p["bytes"] / (p["us_median"] * 1e3) if p["bytes"] else None
            print(
                f"    {p['label']:>8s} each way, {p['blocks']:4d} blocks: {p['us_median']:8.1f} us "
                f"(p10 {p['us_p10']:.1f}, p90 {p['us_p90']:.1f})" + (f"  {gbps:.0f} GB/s per direction" if gbps else "")
            )
        if fl.get("error"):
            print(f"    floor not measured: {fl['error']}")


def main(argv=None):
    p = scaffold.parser(__doc__)
    p.add_argument("--sizes-mib", default="64,256", help="peer copy sizes in MiB (default 64,256)")
    scaffold.add_iters(p, 20, "timed copies per size")
    p.add_argument("--flag-iters", type=int, default=1000)
    scaffold.add_switch(p, "--floor", "measure the bare-exchange floor table (default on; needs the extension)")
    scaffold.add_out(p, "microbench.json")
    args = p.parse_args(argv)
    ctx = common.init_distributed()
    m = run(ctx, tuple(int(v) for v in args.sizes_mib.split(",")), args.iters, args.flag_iters, args.floor)
    if ctx.rank == 0:
        print_summary(m)
        path = os.path.join(args.out, "microbench.json")
        common.write_json(path, {"meta": common.metadata(ctx), "microbench": m})
        print(f"wrote {path}")
    scaffold.finish()


if __name__ == "__main__":
    sys.exit(main())
