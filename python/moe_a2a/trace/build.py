"""A trace built from every rank's profile dump (build_trace), written (save, collective) and read (load)."""

import gzip
import json
import sys
import weakref

from .clock import ClockMap, fit_clock, ticks_to_ns
from .events import KERNELS, TRACE_VERSION, kernel_of

_active = None  # the last AllToAll created with profile=True (weak)


def _register(ep) -> None:
    global _active
    _active = weakref.ref(ep)


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
    from .._collective import all_gather
    from .._ext import ext

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
