"""Text views of a trace: check, summary, timeline, chain, blocks, late, lineup."""

import statistics

from .events import KERNELS, complete_events, kernel_of, rank_names, span_ns


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
        evs.sort(key=lambda e: (span_ns(e)[0], -span_ns(e)[1]))
        stack = []
        for e in evs:
            s, t = span_ns(e)
            while stack and span_ns(stack[-1])[1] <= s:
                stack.pop()
            if stack and t > span_ns(stack[-1])[1]:
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
        s, t = span_ns(e)
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
            s, t = span_ns(e)
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
        runs = sorted((span_ns(e) + (e["name"],) for e in mine if "." not in e["name"] and (e["tid"] - 1) % waves == 0))
        stages = sorted(
            (span_ns(e) + (e["name"], (e["tid"] - 1) % waves) for e in mine if "." in e["name"]), key=lambda x: x[:3]
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
            per_block.setdefault((e["name"], (e["tid"] - 1) // waves), []).append(span_ns(e))
    for spans in per_block.values():
        spans.sort()
    return per_block


def _run_of(e, per_block, waves):
    """The run (index into _kernel_spans_by_block's list) that stage event `e` belongs to; None for a
    kernel's own span, or a stage outside every span of its block."""
    if "." not in e["name"]:
        return None
    s, _ = span_ns(e)
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
            s, t = span_ns(e)
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
        s, t = span_ns(e)
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
