"""In-kernel profiler traces: export to Chrome JSON (opens in ui.perfetto.dev), check,
summarise, plot.

    ep = moe_a2a.AllToAll(..., profile=True)      # needs a build with MOE_A2A_PROFILE=1
    ... ep.dispatch / ep.combine ...
    moe_a2a.trace.save("trace.json")             # collective; rank 0 writes the file

    python -m moe_a2a.trace summary trace.json [--png timeline.png]     (trace.json.gz too)
    python -m moe_a2a.trace timeline trace.json [--block B] [--waves]
    python -m moe_a2a.trace chain trace.json
    python -m moe_a2a.trace blocks trace.json [--kernel K] [--run N] [--every S]
    python -m moe_a2a.trace lineup trace.json [--kernel K] [--run N]
    python -m moe_a2a.trace late trace.json [--kernel K] [--threshold US] [--top N]
    python -m moe_a2a.trace check trace.json

Layout: pid = rank + 1 ("rank N"); one track per wave of a block, tid = block * waves + wave + 1
("block B wave W"); complete events ("ph": "X") in microseconds from the earliest event, on
rank 0's clock. Each rank's clock is mapped onto rank 0's through the ping-pong samples taken
before and after the run (offset from the fastest round trip, drift linear in between); the
error bound (half that round trip) is written into the trace.

Everything except save() is pure Python (json; matplotlib for --png): event names travel in
the trace, so these tools never need the compiled extension.
"""

import argparse
import gzip
import json
import statistics
import sys
import weakref

# The kernels in pipeline order (a forward round, then the backward of combine's);
# tests/python/cpu/test_trace.py checks this against
# include/moe_a2a/profiler_events.h, the table the names come from.
KERNELS = ("dispatch", "combine", "combine_backward")
TRACE_VERSION = 1

_active = None  # the last AllToAll created with profile=True (weak)


def _register(ep) -> None:
    global _active
    _active = weakref.ref(ep)


def kernel_of(name: str) -> str:
    """'dispatch.wait_rows' -> 'dispatch'; a kernel's own span is named after it."""
    return name.split(".", 1)[0]


# ------------------------------------------------------------------------- clock alignment
def ticks_to_ns(ticks: int, rate_hz: int) -> int:
    return ticks * 1_000_000_000 // rate_hz  # Python ints: exact even for 64-bit tick counts


def fit_clock(samples, rate0: int, rate_peer: int):
    """The ping-pong sample with the shortest round trip, as {peer_ns, offset_ns, error_ns,
    rtt_ns}: offset = peer clock - rank-0 clock (ns), error <= half the round trip."""
    best = None
    for t0, tp, t1 in samples:
        a, b, p = ticks_to_ns(t0, rate0), ticks_to_ns(t1, rate0), ticks_to_ns(tp, rate_peer)
        if t0 == 0 or b < a:
            continue  # unfilled or impossible sample
        if best is None or b - a < best["rtt_ns"]:
            best = {"peer_ns": p, "offset_ns": p - (a + (b - a) // 2), "rtt_ns": b - a, "error_ns": (b - a) / 2}
    if best is not None:
        best["samples"] = len(samples)
    return best


class ClockMap:
    """Maps a rank's local ns to rank 0's ns: the offset measured before and after the run,
    interpolated linearly (constant drift) in between and extrapolated outside."""

    def __init__(self, before=None, after=None):
        fits = [f for f in (before, after) if f is not None]
        self.before, self.after = before, after
        self.offset0 = fits[0]["offset_ns"] if fits else 0
        self.at0 = fits[0]["peer_ns"] if fits else 0
        self.slope = 0.0
        if len(fits) == 2 and fits[1]["peer_ns"] != fits[0]["peer_ns"]:
            self.slope = (fits[1]["offset_ns"] - fits[0]["offset_ns"]) / (fits[1]["peer_ns"] - fits[0]["peer_ns"])
        # Between two bounded estimates a linear interpolation is bounded by the worse one.
        self.error_ns = max((f["error_ns"] for f in fits), default=0.0)

    def __call__(self, ns: int) -> int:
        return ns - self.offset0 - round(self.slope * (ns - self.at0))

    def describe(self, rate_hz: int):
        return {
            "offset_before_ns": self.before and self.before["offset_ns"],
            "error_before_ns": self.before and self.before["error_ns"],
            "offset_after_ns": self.after and self.after["offset_ns"],
            "error_after_ns": self.after and self.after["error_ns"],
            "drift_ppm": self.slope * 1e6,
            "error_ns": self.error_ns,
            "clock_rate_hz": rate_hz,
        }


# ------------------------------------------------------------------------- building a trace
def build_trace(dumps, event_names, arg_names):
    """One Chrome-JSON trace (a dict) from every rank's profile dump (AllToAll.profile_collect())."""
    dumps = sorted(dumps, key=lambda d: d["rank"])
    root = dumps[0]
    rates = {d["rank"]: d["clock_rate_hz"] for d in dumps}
    maps = {0: ClockMap()}
    for d in dumps[1:]:
        p = d["rank"]

        def fit(key):
            rows = root.get(key) or []
            return fit_clock(rows[p], rates[0], rates[p]) if p < len(rows) and rows[p] else None

        maps[p] = ClockMap(fit("clock_before"), fit("clock_after"))

    rows = []  # (pid, tid, start_ns, end_ns, name, arg, block, wave)
    for d in dumps:
        r, rate, waves, cmap = d["rank"], d["clock_rate_hz"], d["waves_per_block"], maps[d["rank"]]
        for block, wave, ev, arg, start, end in d["events"]:
            s, e = cmap(ticks_to_ns(start, rate)), cmap(ticks_to_ns(end, rate))
            rows.append((r + 1, block * waves + wave + 1, s, max(s, e), ev, arg, block, wave))
    origin = min((row[2] for row in rows), default=0)
    rows.sort(key=lambda x: (x[0], x[1], x[2], -(x[3] - x[2])))  # parents before children

    events = []
    for d in dumps:
        pid = d["rank"] + 1
        err_us = maps[d["rank"]].error_ns / 1e3
        events += [
            {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"rank {d['rank']}"}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}},
            {
                "name": "process_labels",
                "ph": "M",
                "pid": pid,
                "args": {"labels": f"clock error <= {err_us:.2f} us, dropped {d['dropped']}"},
            },
        ]
    tracks = {(x[0], x[1]): (x[6], x[7]) for x in rows}
    for (pid, tid), (block, wave) in sorted(tracks.items()):
        events += [
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": f"block {block} wave {wave}"}},
            {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}},
        ]
    for pid, tid, s, e, ev, arg, block, wave in rows:
        name = event_names[ev] if 0 <= ev < len(event_names) else f"event_{ev}"
        args = {"block": block, "wave": wave}
        if 0 <= ev < len(arg_names) and arg_names[ev]:
            args[arg_names[ev]] = arg
        events.append(
            {
                "name": name,
                "cat": kernel_of(name),
                "ph": "X",
                "pid": pid,
                "tid": tid,
                "ts": round((s - origin) / 1e3, 3),
                "dur": round((e - s) / 1e3, 3),
                "args": args,
            }
        )

    clock = {str(d["rank"]): maps[d["rank"]].describe(d["clock_rate_hz"]) for d in dumps}
    records = {str(d["rank"]): {k: d[k] for k in ("attempted", "dropped", "invalid", "capacity")} for d in dumps}
    err_us = max(m.error_ns for m in maps.values()) / 1e3
    dropped = sum(d["dropped"] for d in dumps)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "producer": "moe_a2a in-kernel profiler",
            "clock_alignment_error_us": f"{err_us:.3f}",
            "dropped_records": str(dropped),
        },
        "moe_a2a": {
            "version": TRACE_VERSION,
            "world": len(dumps),
            "event_names": list(event_names),
            "arg_names": list(arg_names),
            "kernels": list(KERNELS),
            "waves_per_block": root["waves_per_block"],
            "origin_ns": origin,
            "clock_alignment_error_us": err_us,
            "clock": clock,
            "records": records,
            "dropped_records": dropped,
        },
    }


def save(path, ep=None):
    """Collective over ep's group: collects every rank's records and writes one trace on
    rank 0. Returns the trace dict on rank 0, None elsewhere. Recording goes on afterwards,
    into emptied buffers."""
    if ep is None:
        ep = _active() if _active is not None else None
    if ep is None:
        raise RuntimeError("moe_a2a.trace.save: no AllToAll was created with profile=True")
    from ._collective import all_gather
    from ._ext import ext

    dumps = all_gather(ep.profile_collect(), ep.group, ep.device)
    if ep.rank != 0:
        return None
    trace = build_trace(dumps, ext().profiler_event_names(), ext().profiler_event_arg_names())
    with open(path, "w") as f:
        json.dump(trace, f, separators=(",", ":"))
    info = trace["moe_a2a"]
    if info["dropped_records"]:
        print(
            f"moe_a2a.trace: {info['dropped_records']} records did not fit the per-track buffers and were "
            "dropped; raise AllToAll(profile_capacity=...)",
            file=sys.stderr,
        )
    return trace


def load(path):
    """A trace file, plain or gzip-compressed (traces kept under docs/results/ are .json.gz)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":  # the gzip magic number
        data = gzip.decompress(data)
    return json.loads(data)


# ------------------------------------------------------------------------- reading a trace
def complete_events(trace):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


def _ns(e):
    s = round(e["ts"] * 1e3)
    return s, s + round(e["dur"] * 1e3)


def rank_names(trace):
    """{pid: 'rank N'} from the metadata events."""
    return {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }


def check(trace):
    """Problems found in a trace (an empty list when it is sound): event fields, nesting on
    every track, stages inside their kernel's span, every kernel on every rank."""
    problems = []
    if not isinstance(trace.get("traceEvents"), list):
        return ["no traceEvents list"]
    xs = complete_events(trace)
    for e in xs:
        ok = (
            isinstance(e.get("name"), str)
            and isinstance(e.get("pid"), int)
            and isinstance(e.get("tid"), int)
            and isinstance(e.get("ts"), (int, float))
            and isinstance(e.get("dur"), (int, float))
        )
        if not ok or e["pid"] < 1 or e["tid"] < 1 or e["dur"] < 0 or e["ts"] < 0:
            problems.append(f"bad event {e}")
    if problems:
        return problems
    tracks = {}
    for e in xs:
        tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for (pid, tid), evs in sorted(tracks.items()):
        evs.sort(key=lambda e: (_ns(e)[0], -_ns(e)[1]))
        stack = []
        for e in evs:
            s, t = _ns(e)
            while stack and _ns(stack[-1])[1] <= s:
                stack.pop()
            if stack and t > _ns(stack[-1])[1]:
                problems.append(
                    f"pid {pid} tid {tid}: {e['name']} at {e['ts']} us overlaps "
                    f"{stack[-1]['name']} at {stack[-1]['ts']} us without nesting"
                )
            if "." in e["name"] and (not stack or stack[0]["name"] != kernel_of(e["name"])):
                problems.append(
                    f"pid {pid} tid {tid}: {e['name']} at {e['ts']} us is outside a {kernel_of(e['name'])} span"
                )
            stack.append(e)
    kernels = {e["name"] for e in xs if "." not in e["name"]}
    for pid, name in sorted(rank_names(trace).items()):
        mine = {e["name"] for e in xs if e["pid"] == pid and "." not in e["name"]}
        if kernels - mine:
            problems.append(f"{name}: no span of {sorted(kernels - mine)}")
    return problems


def _stats(values):
    return min(values), statistics.median(values), max(values)


def summary(trace, top=5) -> str:
    """A text report: time per stage per rank, the slowest blocks and whom they waited for."""
    info = trace.get("moe_a2a", {})
    xs = complete_events(trace)
    names = rank_names(trace)
    waves = info.get("waves_per_block", 1)
    out = [
        f"moe_a2a trace: {len(names)} rank(s), {len(xs)} events; clock alignment error <= "
        f"{info.get('clock_alignment_error_us', float('nan')):.3f} us; dropped records: "
        f"{info.get('dropped_records', '?')}"
    ]
    # per (pid, name, block): a kernel's block time is its first start to last end over the
    # block's waves; a stage's is the sum of its events over the block's waves.
    per_block = {}
    for e in xs:
        block = (e["tid"] - 1) // waves
        s, t = _ns(e)
        key = (e["pid"], e["name"], block)
        if "." in e["name"]:
            per_block[key] = per_block.get(key, 0) + (t - s)
        else:
            lo, hi = per_block.get(key, (s, t))
            per_block[key] = (min(lo, s), max(hi, t))
    order = {k: i for i, k in enumerate(KERNELS)}
    stage_names = sorted({k[1] for k in per_block}, key=lambda n: (order.get(kernel_of(n), 99), n))
    out.append(
        "\nTime per stage per rank, us per block (kernel: first start to last end over the block's "
        "waves; stage: sum over the block's waves)"
    )
    out.append(f"{'stage':32s} {'rank':>6s} {'blocks':>6s} {'min':>9s} {'median':>9s} {'max':>9s}")
    for name in stage_names:
        for pid in sorted(names):
            vals = [
                (v[1] - v[0]) if isinstance(v, tuple) else v
                for (p, n, _), v in per_block.items()
                if p == pid and n == name
            ]
            if vals:
                lo, med, hi = _stats(vals)
                out.append(f"{name:32s} {pid - 1:>6d} {len(vals):>6d} {lo / 1e3:9.2f} {med / 1e3:9.2f} {hi / 1e3:9.2f}")
    waits = {}  # (pid, block, kernel) -> (dur_ns, peer)
    for e in xs:
        if "." in e["name"] and e["name"].split(".", 1)[1].startswith("wait"):  # the block's longest wait
            s, t = _ns(e)
            key = (e["pid"], (e["tid"] - 1) // waves, kernel_of(e["name"]))
            if t - s >= waits.get(key, (-1, None))[0]:
                waits[key] = (t - s, e["args"].get("peer"))
    out.append(f"\nSlowest blocks (top {top} per kernel over all ranks)")
    for k in KERNELS:
        spans = sorted(((v[1] - v[0], p, b) for (p, n, b), v in per_block.items() if n == k), reverse=True)
        for dur, pid, block in spans[:top]:
            w = waits.get((pid, block, k))
            note = f", waited {w[0] / 1e3:.2f} us for rank {w[1]}" if w else ""
            out.append(f"  {k:14s} rank {pid - 1} block {block:4d}: {dur / 1e3:9.2f} us{note}")
    out.append("\nWaits by peer (each block's longest wait, by the peer whose signal ended it)")
    by_peer = {}
    for (pid, _, k), (dur, peer) in waits.items():
        by_peer.setdefault((k, pid, peer), []).append(dur)
    for (k, pid, peer), durs in sorted(by_peer.items()):
        lo, med, hi = _stats(durs)
        out.append(
            f"  {k + '.wait':20s} rank {pid - 1} waited on rank {peer}: {len(durs):4d} blocks, "
            f"median {med / 1e3:.2f} us, max {hi / 1e3:.2f} us"
        )
    return "\n".join(out)


def timeline(trace, block=0, by_wave=False) -> str:
    """One block's critical path: for every rank and kernel, when each stage of block `block`
    starts and ends, in us from the block's kernel start (stage: first start to last end over
    the block's waves), median over the kernel's runs in the trace (a trace of N graph-replayed
    iterations has N runs). At small batches one block does all of a rank's work, so block 0's
    timeline is where the time goes; a gap of 0.1 us or more before a stage (after every earlier
    stage ended) is shown: work no stage records. by_wave: also each wave's own stages, in the same
    units: what the block's spans hide when one wave does its stages one after the other while the
    others wait at the next barrier."""
    info = trace.get("moe_a2a", {})
    waves = info.get("waves_per_block", 1)
    xs = [e for e in complete_events(trace) if (e["tid"] - 1) // waves == block]
    out = [f"Timeline of block {block}, us from its kernel start (median over runs)"]
    order = {k: i for i, k in enumerate(KERNELS)}
    for pid, name in sorted(rank_names(trace).items()):
        mine = [e for e in xs if e["pid"] == pid]
        runs = sorted((_ns(e) + (e["name"],) for e in mine if "." not in e["name"] and (e["tid"] - 1) % waves == 0))
        stages = sorted(
            (_ns(e) + (e["name"], (e["tid"] - 1) % waves) for e in mine if "." in e["name"]), key=lambda x: x[:3]
        )
        spans = {}  # kernel -> run durations; (kernel, stage) -> [(start, end)] per run
        per_wave = {}  # (kernel, wave, stage) -> [(start, end)] per run
        for start, end, kernel in runs:
            spans.setdefault(kernel, []).append(end - start)
            inside, inside_wave = {}, {}
            for s, t, stage, wave in stages:
                if start <= s <= end and kernel_of(stage) == kernel:
                    for key, table in ((stage, inside), ((wave, stage), inside_wave)):
                        lo, hi = table.get(key, (s, t))
                        table[key] = (min(lo, s), max(hi, t))
            for stage, (s, t) in inside.items():
                spans.setdefault((kernel, stage), []).append((s - start, t - start))
            for (wave, stage), (s, t) in inside_wave.items():
                per_wave.setdefault((kernel, wave, stage), []).append((s - start, t - start))
        for kernel in sorted((k for k in spans if isinstance(k, str)), key=lambda k: order.get(k, 99)):
            durs = spans[kernel]
            out.append(f"{name} {kernel}: {len(durs)} run(s), median {statistics.median(durs) / 1e3:.2f} us")
            rows = [(k[1], v) for k, v in spans.items() if isinstance(k, tuple) and k[0] == kernel]
            rows = [
                (stage, statistics.median(s for s, _ in v), statistics.median(t for _, t in v), len(v))
                for stage, v in rows
            ]
            reached = 0  # the latest end so far: time after it that no stage covers is a gap
            for stage, s, t, n in sorted(rows, key=lambda r: r[1]):
                gap = f", {(s - reached) / 1e3:.2f} us unrecorded before" if s - reached >= 100 else ""
                out.append(
                    f"  {stage:28s} {s / 1e3:8.2f} -> {t / 1e3:8.2f}  ({(t - s) / 1e3:6.2f} us, {n} run(s){gap})"
                )
                reached = max(reached, t)
            if by_wave:
                for wave in range(waves):
                    mine_w = [(k[2], v) for k, v in per_wave.items() if k[0] == kernel and k[1] == wave]
                    cells = sorted(
                        (statistics.median(s for s, _ in v), statistics.median(t for _, t in v), stage)
                        for stage, v in mine_w
                    )
                    text = ", ".join(f"{stage} {s / 1e3:.2f}-{t / 1e3:.2f}" for s, t, stage in cells)
                    out.append(f"    wave {wave}: {text or 'no stage recorded'}")
    return "\n".join(out)


def _chain_stage(e, rank):
    """A stage's row in chain(): a stage whose argument is a source rank (the backward of combine's
    answers) gets two, this rank's own rows and the peers', which run at different times."""
    source = e.get("args", {}).get("source")
    if source is None:
        return e["name"]
    return e["name"] + (" (own)" if source == rank else " (peers)")


def _per_rank(trace, waves):
    """[(name, rank, its events, its kernel spans by block)] for each rank of the trace, in rank order."""
    xs = complete_events(trace)
    out = []
    for pid, name in sorted(rank_names(trace).items()):
        mine = [e for e in xs if e["pid"] == pid]
        out.append((name, int(name.split()[-1]), mine, _kernel_spans_by_block(mine, waves)))
    return out


def _kernel_spans_by_block(events, waves):
    """{(kernel, block): [(start, end)] sorted}: every launch of each kernel on each block of one
    rank (a kernel's span is recorded by wave 0). Run i of a kernel is its i-th span on each block:
    every block runs every launch."""
    per_block = {}
    for e in events:
        if "." not in e["name"] and (e["tid"] - 1) % waves == 0:
            per_block.setdefault((e["name"], (e["tid"] - 1) // waves), []).append(_ns(e))
    for spans in per_block.values():
        spans.sort()
    return per_block


def _run_of(e, per_block, waves):
    """The run (index into _kernel_spans_by_block's list) that stage event `e` belongs to; None for a
    kernel's own span, or a stage outside every span of its block."""
    if "." not in e["name"]:
        return None
    s, _ = _ns(e)
    spans = per_block.get((kernel_of(e["name"]), (e["tid"] - 1) // waves), [])
    return next((j for j, (a, b) in enumerate(spans) if a <= s <= b), None)


def chain(trace) -> str:
    """The whole kernel's critical path, over all its blocks: for every rank and kernel, when each
    stage first starts and last ends over the kernel's blocks, in us from the kernel's first block
    start, median over the kernel's runs; then the kernel boundaries: the time from a kernel's last
    block end to the next kernel's first block start on the same rank, median per pair of kernels.
    Where timeline() follows one block, this shows the hand-offs between blocks (a sending block's
    publish, the receiving blocks' waits) and what the stream leaves between kernels. A stage whose
    argument is a source rank is split into this rank's own and the peers' (_chain_stage)."""
    info = trace.get("moe_a2a", {})
    waves = info.get("waves_per_block", 1)
    order = {k: i for i, k in enumerate(KERNELS)}
    out = ["Stages over all blocks, us from the kernel's first block start (median over runs)"]
    for name, rank, mine, per_block in _per_rank(trace, waves):
        runs = {}  # (kernel, i) -> [first start, last end]
        for (kernel, _), spans in per_block.items():
            for i, (s, t) in enumerate(spans):
                lo, hi = runs.get((kernel, i), (s, t))
                runs[(kernel, i)] = (min(lo, s), max(hi, t))
        stages = {}  # (kernel, i, stage) -> [first start, last end]
        for e in mine:
            i = _run_of(e, per_block, waves)
            if i is None:
                continue
            s, t = _ns(e)
            key = (kernel_of(e["name"]), i, _chain_stage(e, rank))
            lo, hi = stages.get(key, (s, t))
            stages[key] = (min(lo, s), max(hi, t))
        for kernel in sorted({k for k, _ in runs}, key=lambda k: order.get(k, 99)):
            starts = {i: runs[(k, i)][0] for k, i in runs if k == kernel}
            durs = [runs[(kernel, i)][1] - starts[i] for i in starts]
            out.append(f"{name} {kernel}: {len(durs)} run(s), median {statistics.median(durs) / 1e3:.2f} us")
            rows = {}
            for (k, i, stage), (s, t) in stages.items():
                if k == kernel:
                    rows.setdefault(stage, []).append((s - starts[i], t - starts[i]))
            cells = sorted(
                (statistics.median(s for s, _ in v), statistics.median(t for _, t in v), stage, len(v))
                for stage, v in rows.items()
            )
            for s, t, stage, n in cells:
                out.append(f"  {stage:32s} {s / 1e3:8.2f} -> {t / 1e3:8.2f}  ({n} run(s))")
        sequence = sorted((s, t, k) for (k, _), (s, t) in runs.items())
        gaps = {}
        for (_, end, a), (start, _, b) in zip(sequence, sequence[1:]):
            gaps.setdefault(f"{a} -> {b}", []).append(start - end)
        for pair, v in sorted(gaps.items()):
            out.append(f"  boundary {pair:24s} median {statistics.median(v) / 1e3:6.2f} us ({len(v)} of them)")
    return "\n".join(out)


def _block_stages(mine, spans, waves, kernel, run, rank):
    """{block: {stage: [first start, last end, waves]}} of run `run` of `kernel` on one rank (its
    events `mine`, its kernel spans by block `spans`), stages split into own and peers as in chain()."""
    cells = {}
    for e in mine:
        if kernel_of(e["name"]) != kernel or _run_of(e, spans, waves) != run:
            continue
        s, t = _ns(e)
        cell = cells.setdefault((e["tid"] - 1) // waves, {}).setdefault(_chain_stage(e, rank), [s, t, 0])
        cell[0], cell[1], cell[2] = min(cell[0], s), max(cell[1], t), cell[2] + 1
    return cells


def _stage_cells(mine, spans, waves, kernel, run, rank):
    """{stage: {block: (first start, last end)}} of run `run` of `kernel` on one rank: _block_stages
    turned stage first, for what compares the blocks of each stage (lineup, late)."""
    by_stage = {}
    for block, here in _block_stages(mine, spans, waves, kernel, run, rank).items():
        for stage, (s, t, _) in here.items():
            by_stage.setdefault(stage, {})[block] = (s, t)
    return by_stage


def blocks(trace, kernel, run=0, every=1) -> str:
    """Every block of one run of `kernel` on each rank: per block, each stage's first start and last
    end over the block's waves (us from the run's first block start on that rank) and how many waves
    recorded it, stages split into own and peers as in chain(). Where chain() gives each stage over
    all blocks, this shows how the blocks differ: which ones end the kernel, which idle, whether the
    spread is in their work or in their waits. every: one block in that many."""
    info = trace.get("moe_a2a", {})
    waves = info.get("waves_per_block", 1)
    out = [f"{kernel}, run {run}: each block's stages, us from the run's first block start (first-last, waves)"]
    for name, rank, mine, spans in _per_rank(trace, waves):
        launches = {b: v[run] for (k, b), v in spans.items() if k == kernel and len(v) > run}
        if not launches:
            out.append(f"{name}: no run {run} of {kernel}")
            continue
        t0 = min(s for s, _ in launches.values())
        cells = _block_stages(mine, spans, waves, kernel, run, rank)
        stages = {st for c in cells.values() for st in c}
        order = sorted(stages, key=lambda st: statistics.median(c[st][0] for c in cells.values() if st in c))
        out.append(f"{name}:")
        for block in sorted(launches)[::every]:
            s, t = launches[block]
            here = cells.get(block, {})
            text = "  ".join(
                f"{st.split('.', 1)[-1]} {(here[st][0] - t0) / 1e3:.1f}-{(here[st][1] - t0) / 1e3:.1f}({here[st][2]})"
                for st in order
                if st in here
            )
            out.append(f"  block {block:4d}  kernel {(s - t0) / 1e3:.1f}-{(t - t0) / 1e3:.1f}  {text}")
    return "\n".join(out)


def late(trace, kernel, threshold_us=0.5, top=10) -> str:
    """Blocks that fall behind the others of their kernel, over every run, per rank: for each stage
    run by three or more blocks, each block's end against the median end of that stage over the
    blocks of the run; a (stage, block) is listed when it ends `threshold_us` or more after that
    median in at least half the runs it ran the stage, and it ran the stage in at least half the
    kernel's runs (its lateness: least, median, most over those runs), the latest first, at most
    `top` a rank. Also which block ended the kernel, in how many runs. Where blocks() shows one
    run, this says what holds in every run: a block whose stage is late each time (one wave's
    fence holding its block's barriers, say) and whether it ends the kernel."""
    info = trace.get("moe_a2a", {})
    waves = info.get("waves_per_block", 1)
    out = [
        f"{kernel}: blocks whose stage ends {threshold_us:.1f} us or more after that stage's median end over the "
        "blocks, in at least half the runs (lateness in us: least / median / most over those runs)"
    ]
    for name, rank, mine, spans in _per_rank(trace, waves):
        mine_spans = {b: v for (k, b), v in spans.items() if k == kernel}
        runs = min((len(v) for v in mine_spans.values()), default=0)
        if runs == 0:
            out.append(f"{name}: no run of {kernel}")
            continue
        lateness = {}  # (stage, block) -> [us behind the stage's median end, one per run it ran the stage]
        last_block = {}  # block -> runs it ended the kernel
        for i in range(runs):
            ends = {b: v[i][1] for b, v in mine_spans.items()}
            last = max(ends, key=ends.get)
            last_block[last] = last_block.get(last, 0) + 1
            for stage, cells in _stage_cells(mine, spans, waves, kernel, i, rank).items():
                if len(cells) < 3:
                    continue
                median = statistics.median(t for _, t in cells.values())
                for block, (_, t) in cells.items():
                    lateness.setdefault((stage, block), []).append((t - median) / 1e3)
        enders = ", ".join(f"block {b} in {n}" for b, n in sorted(last_block.items(), key=lambda kv: -kv[1]))
        out.append(f"{name}: {runs} run(s); the kernel's last block: {enders}")
        rows = []
        for (stage, block), v in lateness.items():
            behind = [x for x in v if x >= threshold_us]
            if 2 * len(v) >= runs and 2 * len(behind) >= len(v):
                rows.append((statistics.median(v), stage, block, len(behind), len(v), min(v), max(v)))
        for med, stage, block, n_late, n, lo, hi in sorted(rows, key=lambda r: -r[0])[:top]:
            out.append(
                f"  {stage.split('.', 1)[-1]:24s} block {block:4d}  {lo:5.2f} / {med:5.2f} / {hi:5.2f}  "
                f"(late in {n_late} of {n} runs)"
            )
        if not rows:
            out.append("  none")
    return "\n".join(out)


def lineup(trace, kernel, run=None) -> str:
    """Each run of `kernel` with the ranks on one clock (rank 0's, within the trace's alignment
    error): per rank, when the run starts and ends, and for each stage its first start and its
    first, median and last end over the blocks (a block's end: its waves' last), in us from the
    run's first block start over all ranks. Where chain() takes each rank's medians from its own
    kernel start, this lines the ranks up run by run: when one rank's release goes out against
    when a peer's wait for it ends, which rank ends each run, and runs that differ from the median
    (a rank with more tokens sending while its peer waits). Run i is every rank's i-th launch.
    run: only that run (default every one)."""
    info = trace.get("moe_a2a", {})
    waves = info.get("waves_per_block", 1)
    err = info.get("clock_alignment_error_us", 0.0)
    per_rank = {name: (rank, spans, mine) for name, rank, mine, spans in _per_rank(trace, waves)}
    counts = {
        n: min((len(v) for (k, _), v in sp.items() if k == kernel), default=0) for n, (_, sp, _) in per_rank.items()
    }
    runs = range(min(counts.values(), default=0)) if run is None else [run]
    out = [
        f"{kernel}, the ranks on rank 0's clock (alignment error <= {err:.2f} us), us from the run's first block "
        "start: each stage's first start, then its first / median / last end over the blocks"
    ]
    if len(set(counts.values())) > 1:
        out.append(
            "  runs per rank differ ("
            + ", ".join(f"{n}: {c}" for n, c in counts.items())
            + "): run i is each one's i-th"
        )
    for i in runs:
        if i < 0 or any(c <= i for c in counts.values()):
            out.append(f"run {i}: not on every rank")
            continue
        launches = {n: {b: v[i] for (k, b), v in sp.items() if k == kernel} for n, (_, sp, _) in per_rank.items()}
        t0 = min(s for spans in launches.values() for s, _ in spans.values())
        out.append(f"run {i}")
        for name, (rank, spans, mine) in per_rank.items():
            first = min(s for s, _ in launches[name].values())
            last = max(t for _, t in launches[name].values())
            out.append(f"  {name}  run {(first - t0) / 1e3:.2f}-{(last - t0) / 1e3:.2f}")
            by_stage = _stage_cells(mine, spans, waves, kernel, i, rank)
            for stage, cells in sorted(by_stage.items(), key=lambda kv: min(s for s, _ in kv[1].values())):
                ends = sorted(t for _, t in cells.values())
                start = min(s for s, _ in cells.values())
                out.append(
                    f"    {stage.split('.', 1)[-1]:24s} {(start - t0) / 1e3:7.2f}  |  {(ends[0] - t0) / 1e3:7.2f} "
                    f"{(statistics.median(ends) - t0) / 1e3:7.2f} {(ends[-1] - t0) / 1e3:7.2f}  ({len(ends)} blocks)"
                )
    return "\n".join(out)


def plot_png(trace, path) -> None:
    """A timeline per rank (y: track, x: time), for readers without Perfetto."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = complete_events(trace)
    pids = sorted(rank_names(trace)) or sorted({e["pid"] for e in xs})
    names = sorted({e["name"] for e in xs}, key=lambda n: ("." in n, n))
    colors = {n: plt.cm.tab20(i % 20) for i, n in enumerate(names)}
    fig, axes = plt.subplots(len(pids), 1, figsize=(16, 3 + 3 * len(pids)), sharex=True, squeeze=False)
    for ax, pid in zip(axes[:, 0], pids):
        for n in names:
            bars = {}
            for e in xs:
                if e["pid"] == pid and e["name"] == n:
                    bars.setdefault(e["tid"], []).append((e["ts"], max(e["dur"], 1e-3)))
            kernel = "." not in n
            for tid, b in bars.items():
                ax.broken_barh(
                    b,
                    (tid - 0.5, 1.0 if kernel else 0.7),
                    facecolors=colors[n],
                    alpha=0.35 if kernel else 0.9,
                    linewidth=0,
                )
        ax.set_ylabel(f"rank {pid - 1}\ntrack (block x waves + wave)")
        ax.invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[n], alpha=0.35 if "." not in n else 0.9) for n in names]
    fig.legend(handles, names, loc="upper center", ncol=4, fontsize=8)
    axes[-1, 0].set_xlabel("time (us, rank 0's clock)")
    err = trace.get("moe_a2a", {}).get("clock_alignment_error_us")
    if err is not None:
        axes[0, 0].set_title(f"clock alignment error <= {err:.2f} us", fontsize=9, loc="right")
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m moe_a2a.trace", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary", help="time per stage per rank, slowest blocks, waits by peer")
    s.add_argument("trace")
    s.add_argument("--png", help="also draw a timeline per rank into this PNG")
    s.add_argument("--top", type=int, default=5)
    c = sub.add_parser("check", help="validate a trace (nesting, spans, every kernel on every rank)")
    c.add_argument("trace")
    t = sub.add_parser("timeline", help="one block's stages, us from its kernel start, median over runs")
    t.add_argument("trace")
    t.add_argument("--block", type=int, default=0, help="block index (default 0: the one with work at any batch)")
    t.add_argument("--waves", action="store_true", help="also each wave's stages (median over runs)")
    ch = sub.add_parser("chain", help="each stage over all blocks of its kernel, and the gaps between kernels")
    ch.add_argument("trace")
    b = sub.add_parser("blocks", help="every block's stages in one run of a kernel, per rank")
    b.add_argument("trace")
    b.add_argument("--kernel", default=KERNELS[0], choices=KERNELS, help=f"default {KERNELS[0]}")
    b.add_argument("--run", type=int, default=0, help="which run of the kernel in the trace (default 0)")
    b.add_argument("--every", type=int, default=1, help="one block in this many (default every block)")
    la = sub.add_parser("late", help="blocks whose stage ends behind the others', in most runs, per rank")
    la.add_argument("trace")
    la.add_argument("--kernel", default=KERNELS[0], choices=KERNELS, help=f"default {KERNELS[0]}")
    la.add_argument("--threshold", type=float, default=0.5, help="us behind the stage's median end (default 0.5)")
    la.add_argument("--top", type=int, default=10, help="at most this many (stage, block) a rank (default 10)")
    lu = sub.add_parser("lineup", help="each run of a kernel with the ranks on one clock, per stage")
    lu.add_argument("trace")
    lu.add_argument("--kernel", default=KERNELS[0], choices=KERNELS, help=f"default {KERNELS[0]}")
    lu.add_argument("--run", type=int, default=None, help="only this run (default every one)")
    args = p.parse_args(argv)
    trace = load(args.trace)
    if args.cmd == "late":
        print(late(trace, args.kernel, args.threshold, args.top))
        return 0
    if args.cmd == "lineup":
        print(lineup(trace, args.kernel, args.run))
        return 0
    if args.cmd == "blocks":
        print(blocks(trace, args.kernel, args.run, max(1, args.every)))
        return 0
    if args.cmd == "chain":
        print(chain(trace))
        return 0
    if args.cmd == "timeline":
        print(timeline(trace, args.block, by_wave=args.waves))
        return 0
    if args.cmd == "check":
        problems = check(trace)
        for line in problems[:50]:
            print(line)
        print(f"{len(problems)} problem(s)" if problems else "trace OK")
        return 1 if problems else 0
    print(summary(trace, args.top))
    if args.png:
        plot_png(trace, args.png)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
