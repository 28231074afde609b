"""moe_a2a.trace on synthetic profiles (no GPU, no extension): clock alignment, Chrome-JSON
export, nesting and span checks, summary, PNG, and the event table shared with C++."""

import gzip
import json
import re
from pathlib import Path

import pytest

from moe_a2a import trace

HEADER = Path(__file__).resolve().parents[3] / "include" / "moe_a2a" / "profiler_events.h"


def header_table():
    """(enum, name, arg) rows of the X-macro table, read from the header's text."""
    return re.findall(r'X\((k\w+),\s*"([^"]*)",\s*"([^"]*)"\)', HEADER.read_text())


NAMES = [n for _, n, _ in header_table()]
ARGS = [a for _, _, a in header_table()]
EV = {n: i for i, n in enumerate(NAMES)}
WAVES = 2


def test_header_table_matches_python():
    assert len(NAMES) == len(set(NAMES)) >= 4
    kernels = tuple(n for n in NAMES if "." not in n)
    assert kernels == trace.KERNELS  # same kernels, pipeline order
    for n in NAMES:
        assert trace.kernel_of(n) in kernels, n


class FakeRank:
    """Events of one rank generated on 'true' time (rank 0's ns), stored in local ticks:
    local_ns = true_ns + offset_ns + drift * true_ns."""

    def __init__(self, rank, rate_hz, offset_ns, drift=0.0):
        self.rank, self.rate, self.offset, self.drift = rank, rate_hz, offset_ns, drift
        self.events = []

    def ticks(self, true_ns):
        local = true_ns + self.offset + self.drift * true_ns
        return int(local * self.rate // 1_000_000_000)

    def add(self, block, wave, name, s, e, arg=-1):
        self.events.append((block, wave, EV[name], arg, self.ticks(s), self.ticks(e)))


def pingpong(peer, at_ns, n=16, one_way_ns=800, jitter=lambda i: 37 * i % 500):
    """Samples (t0, tp, t1) in ticks: rank 0 clock for t0/t1, the peer's for tp."""
    out = []
    for i in range(n):
        t0 = at_ns + i * 5000
        tp = t0 + one_way_ns + jitter(i)
        t1 = tp + one_way_ns + jitter(i + 3)
        out.append((t0, peer.ticks(tp), t1))  # rank 0 ticks at 1 GHz == ns
    return out


def fake_ranks(world):
    """Rank 0 at 1 GHz with no offset; the others at 100 MHz or 1 GHz, each offset and drifting."""
    return [FakeRank(0, 1_000_000_000, 0)] + [
        FakeRank(r, 100_000_000 if r % 2 else 1_000_000_000, 12_345_678 * r, drift=2e-6 * r) for r in range(1, world)
    ]


def dumps_of(ranks, base, blocks=3, capacity=64, dropped=0):
    """The profiler dumps of FakeRanks whose events are in, with clock samples around `base`."""
    world = len(ranks)
    dumps = []
    for fr in ranks:
        dumps.append(
            {
                "rank": fr.rank,
                "world": world,
                "clock_rate_hz": fr.rate,
                "num_blocks": blocks,
                "waves_per_block": WAVES,
                "capacity": capacity,
                "attempted": len(fr.events) + dropped,
                "dropped": dropped if fr.rank == world - 1 else 0,
                "invalid": 0,
                "events": fr.events,
                "clock_before": [[]] + [pingpong(p, base - 10_000_000) for p in ranks[1:]] if fr.rank == 0 else [],
                "clock_after": [[]] + [pingpong(p, base + 10_000_000) for p in ranks[1:]] if fr.rank == 0 else [],
            }
        )
    return dumps


def make_dumps(world=2, capacity=64, dropped=0):
    ranks = fake_ranks(world)
    base = 1_000_000_000  # the run, on the true clock
    for fr in ranks:
        for k, kernel in enumerate(trace.KERNELS[:2]):  # a forward round
            t = base + k * 100_000
            for block in range(3):
                for wave in range(WAVES):
                    s, e = t + 1000 * block, t + 50_000 + 1000 * block
                    fr.add(block, wave, kernel, s, e)
                    if wave == 0:
                        wait = {"dispatch": "dispatch.wait_rows", "combine": "combine.wait"}[kernel]
                        fr.add(block, 0, wait, s + 100, s + 20_000 + 3000 * block, (fr.rank + 1) % world)
                    stage = {"dispatch": "dispatch.copy", "combine": "combine.reduce"}[kernel]
                    fr.add(block, wave, stage, s + 30_000, s + 35_000, 7)
                    fr.add(block, wave, stage, s + 35_000, s + 36_000, 8)  # back to back: still nested
    return dumps_of(ranks, base, capacity=capacity, dropped=dropped)


def build(**kw):
    return trace.build_trace(make_dumps(**kw), NAMES, ARGS)


def test_fit_clock_recovers_offset_within_half_rtt():
    peer = FakeRank(1, 100_000_000, 5_000_000)
    fit = trace.fit_clock(pingpong(peer, 10**9), 1_000_000_000, 100_000_000)
    assert fit["rtt_ns"] == min(1600 + 37 * i % 500 + 37 * (i + 3) % 500 for i in range(16))  # fastest sample
    assert abs(fit["offset_ns"] - 5_000_000) <= fit["error_ns"] + 10  # + one 100 MHz tick


def test_clock_map_corrects_drift():
    peer = FakeRank(1, 1_000_000_000, 1_000_000, drift=5e-6)
    before = trace.fit_clock(pingpong(peer, 10**9, one_way_ns=500, jitter=lambda i: 0), 10**9, 10**9)
    after = trace.fit_clock(pingpong(peer, 2 * 10**9, one_way_ns=500, jitter=lambda i: 0), 10**9, 10**9)
    m = trace.ClockMap(before, after)
    for true_ns in (10**9, 1.5e9, 2 * 10**9):
        assert abs(m(peer.ticks(true_ns)) - true_ns) <= 2
    assert m.slope == pytest.approx(5e-6, rel=1e-3)


@pytest.mark.parametrize("world", [2, 3, 8])
def test_trace_is_valid_chrome_json(world, tmp_path):
    t = build(world=world)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(t))
    t = trace.load(path)
    assert t["displayTimeUnit"] == "ns"
    assert trace.check(t) == []
    meta = [e for e in t["traceEvents"] if e["ph"] == "M"]
    assert {e["args"]["name"] for e in meta if e["name"] == "process_name"} == {f"rank {r}" for r in range(world)}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads[(1, 1)] == "block 0 wave 0" and threads[(world, 2 * WAVES)] == "block 1 wave 1"
    xs = trace.complete_events(t)
    assert min(e["pid"] for e in xs) == 1 and min(e["tid"] for e in xs) == 1  # never 0
    assert min(e["ts"] for e in xs) == 0.0
    assert all(e["dur"] >= 0 for e in xs)
    # Alignment undid each rank's offset and drift: the same true schedule on every rank.
    err = t["moe_a2a"]["clock_alignment_error_us"]
    assert 0 < err < 1.0
    starts = {}
    for e in xs:
        if e["name"] == "dispatch" and e["tid"] == 1:
            starts[e["pid"]] = e["ts"]
    assert max(starts.values()) - min(starts.values()) <= err + 0.02
    waits = [e for e in xs if e["name"] == "dispatch.wait_rows"]
    assert waits and all("peer" in e["args"] for e in waits)


def test_check_finds_overlap_missing_kernel_and_stray_stage():
    t = build()
    xs = trace.complete_events(t)
    token = next(e for e in xs if e["name"] == "dispatch.copy")
    t["traceEvents"].append(dict(token, ts=token["ts"] + token["dur"] / 2))  # overlaps its twin
    t["traceEvents"].append(dict(token, ts=1e6, dur=1.0))  # outside every kernel span
    t["traceEvents"] = [e for e in t["traceEvents"] if not (e.get("name") == "combine" and e.get("pid") == 2)]
    problems = "\n".join(trace.check(t))
    assert "without nesting" in problems
    assert "outside a dispatch span" in problems
    assert "rank 1: no span of ['combine']" in problems


def test_dropped_records_are_reported():
    t = build(dropped=17)
    assert t["moe_a2a"]["dropped_records"] == 17
    assert t["moe_a2a"]["records"]["1"]["dropped"] == 17
    assert t["otherData"]["dropped_records"] == "17"
    assert "dropped records: 17" in trace.summary(t)


def test_summary_and_png(tmp_path, capsys):
    t = build(world=3)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(t))
    text = trace.summary(t)
    for name in NAMES:
        if name in {e["name"] for e in trace.complete_events(t)}:
            assert name in text
    assert "waited on rank" in text and "Slowest blocks" in text
    # rank 1 block 2 waits longest (20 us + 3 us per block, from 0.1 us in), for rank 2
    assert re.search(r"rank 1 block +2: .*waited 25\.90 us for rank 2", text)
    pytest.importorskip("matplotlib")
    png = tmp_path / "t.png"
    assert trace.main(["summary", str(path), "--png", str(png)]) == 0
    assert png.stat().st_size > 10_000
    assert trace.main(["check", str(path)]) == 0
    assert "trace OK" in capsys.readouterr().out
    # compressed, as the traces under docs/results/ are kept
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert trace.load(gz) == t
    assert trace.main(["check", str(gz)]) == 0


def test_chain_over_all_blocks(capsys, tmp_path):
    t = build(world=2)
    text = trace.chain(t)
    rank0 = text.split("rank 1 dispatch")[0]
    # blocks start 1 us apart and run 50 us (make_dumps): the kernel spans 0..52 us
    assert "rank 0 dispatch: 1 run(s), median 52.00 us" in rank0
    # the waits: first from block 0 at 0.1 us, last end block 2's: 2 + 20 + 3 x 2 = 28 us
    assert re.search(r"dispatch\.wait_rows +0\.10 -> +28\.00", rank0)
    # the copies: 30 us after each block's start, the last ends 2 + 36 = 38 us
    assert re.search(r"dispatch\.copy +30\.00 -> +38\.00", rank0)
    # combine starts 100 us after dispatch: 48 us after dispatch's last block
    assert re.search(r"boundary dispatch -> combine +median +48\.00 us \(1 of them\)", rank0)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(t))
    assert trace.main(["chain", str(path)]) == 0
    assert "rank 1 combine: 1 run(s)" in capsys.readouterr().out


def answers_trace():
    """A backward of combine on 2 ranks: each block answers its own rows from 1 to 30 us after its
    start, then the peer's from 31 to 55 us; blocks start 1 us apart and run 60 us."""
    ranks = fake_ranks(2)
    base = 1_000_000_000
    for fr in ranks:
        for block in range(3):
            for wave in range(WAVES):
                s = base + 1000 * block
                fr.add(block, wave, "combine_backward", s, s + 60_000)
                fr.add(block, wave, "combine_backward.answer", s + 1_000, s + 30_000, fr.rank)
                fr.add(block, wave, "combine_backward.answer", s + 31_000, s + 55_000, 1 - fr.rank)
    return trace.build_trace(dumps_of(ranks, base), NAMES, ARGS)


def test_chain_splits_answers_into_own_and_peers():
    text = trace.chain(answers_trace())
    for rank in (0, 1):
        part = text.split(f"rank {rank} combine_backward")[1]
        assert re.search(r"combine_backward\.answer \(own\) +1\.00 -> +32\.00", part), text
        assert re.search(r"combine_backward\.answer \(peers\) +31\.00 -> +57\.00", part), text


def test_blocks_of_one_run(capsys, tmp_path):
    t = build(world=2)
    text = trace.blocks(t, "dispatch")
    rank0 = text.split("rank 1:")[0]
    # make_dumps: block b starts b us after block 0, waits (wave 0) from 0.1 to 20 + 3b us after its
    # start, and every wave copies twice, 30..36 us after its start
    assert re.search(
        r"block +0 +kernel 0\.0-50\.0 +wait_rows 0\.1-20\.0\(1\) +copy 30\.0-36\.0\(%d\)" % (2 * WAVES), rank0
    )
    assert re.search(r"block +2 +kernel 2\.0-52\.0 +wait_rows 2\.1-28\.0\(1\) +copy 32\.0-38\.0", rank0)
    assert "rank 1:" in text and "block    1" not in trace.blocks(t, "dispatch", every=2)
    assert "no run 1 of dispatch" in trace.blocks(t, "dispatch", run=1)
    # the backward of combine's answers, split into own and peers as in chain()
    cb = answers_trace()
    text = trace.blocks(cb, "combine_backward")
    assert re.search(
        r"block +1 +kernel 1\.0-61\.0 +answer \(own\) 2\.0-31\.0\(%d\) +answer \(peers\) 32\.0-56\.0" % WAVES, text
    )
    path = tmp_path / "cb.json"
    path.write_text(json.dumps(cb))
    assert trace.main(["blocks", str(path), "--kernel", "combine_backward", "--every", "3"]) == 0
    out = capsys.readouterr().out
    assert "block    0" in out and "block    1" not in out


def lineup_trace():
    """Two dispatch runs 100 us apart on 2 ranks of 3 blocks (block b starts b us after block 0, runs
    30 us). Rank 1 starts each run 3 us after rank 0 (true clock). Rank 0's block 2 stores its counts
    from 2 to 5 us after its start; rank 1's blocks wait for them from 0.5 us after their start until
    9 + b us after rank 0's run began (run 0) or 12 + b (run 1)."""
    ranks = fake_ranks(2)
    base = 1_000_000_000
    for run in range(2):
        t = base + run * 100_000
        for fr in ranks:
            start = t + 3_000 * fr.rank
            for block in range(3):
                s = start + 1_000 * block
                for wave in range(WAVES):
                    fr.add(block, wave, "dispatch", s, s + 30_000)
                if fr.rank == 0 and block == 2:
                    fr.add(block, 0, "dispatch.counts_out", s + 2_000, s + 5_000, 16)
                if fr.rank == 1:
                    fr.add(
                        block,
                        0,
                        "dispatch.wait_counts",
                        s + 500,
                        t + (9_000 if run == 0 else 12_000) + 1_000 * block,
                        0,
                    )
    return trace.build_trace(dumps_of(ranks, base), NAMES, ARGS)


def lineup_numbers(text, label):
    """The numbers of lineup()'s first line that starts with `label` (rank 1's carry the clock
    alignment's error, about 0.05 us in fake_ranks)."""
    line = next(x for x in text.splitlines() if x.strip().startswith(label))
    return [float(v) for v in re.findall(r"\d+\.\d+", line)]


def test_lineup_puts_the_ranks_on_one_clock(capsys, tmp_path):
    t = lineup_trace()
    text = trace.lineup(t, "dispatch")
    run0, run1 = text.split("run 1\n")
    close = lambda got, want: got == pytest.approx(want, abs=0.1)  # noqa: E731
    # run 0 starts with rank 0's block 0; rank 1 3 us later; each ends 2 + 30 us after its start
    assert close(lineup_numbers(run0, "rank 0"), [0.0, 32.0]) and close(lineup_numbers(run0, "rank 1"), [3.0, 35.0])
    # rank 0's counts go out from 4 to 7 us (block 2 starts at 2), in one block
    assert close(lineup_numbers(run0, "counts_out"), [4.0, 7.0, 7.0, 7.0]) and "(1 blocks)" in run0
    # rank 1's waits start at 3.5 us and end at 9, 10 and 11 us: first, median, last
    assert close(lineup_numbers(run0, "wait_counts"), [3.5, 9.0, 10.0, 11.0]) and "(3 blocks)" in run0
    assert close(lineup_numbers(run1, "wait_counts"), [3.5, 12.0, 13.0, 14.0])
    only = trace.lineup(t, "dispatch", run=1)
    assert "run 0\n" not in only and "run 1\n" in only
    assert "not on every rank" in trace.lineup(t, "dispatch", run=2)
    assert "not on every rank" in trace.lineup(t, "dispatch", run=-1)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(t))
    assert trace.main(["lineup", str(path), "--run", "0"]) == 0
    assert close(lineup_numbers(capsys.readouterr().out, "rank 1"), [3.0, 35.0])


def test_timeline_of_one_block(capsys, tmp_path):
    t = build(world=2)
    text = trace.timeline(t, block=2)
    rank0 = text.split("rank 1 dispatch")[0]
    # block 2 of rank 0: its wait ends 26 us after its kernel start (20 + 3 per block, from 0.1 in),
    # its two back-to-back copies span 30..36 us (see make_dumps)
    assert "rank 0 dispatch: 1 run(s), median 50.00 us" in rank0
    assert re.search(r"dispatch\.wait_rows +0\.10 -> +26\.00 +\( +25\.90 us, 1 run\(s\), 0\.10 us unrecorded", rank0)
    # nothing recorded between the wait's end (26) and the first copy (30)
    assert re.search(
        r"dispatch\.copy +30\.00 -> +36\.00 +\( +6\.00 us, 1 run\(s\), 4\.00 us unrecorded before\)", rank0
    )
    assert rank0.index("dispatch.wait_rows") < rank0.index("dispatch.copy")  # in order of start
    assert "rank 1 combine: 1 run(s)" in text
    assert "wave 0:" not in text
    # by wave: wave 0 waited, then copied; wave 1 only copied (make_dumps)
    by_wave = trace.timeline(t, block=2, by_wave=True).split("rank 1 dispatch")[0]
    assert "    wave 0: dispatch.wait_rows 0.10-26.00, dispatch.copy 30.00-36.00\n" in by_wave
    assert "    wave 1: dispatch.copy 30.00-36.00" in by_wave
    path = tmp_path / "t.json"
    path.write_text(json.dumps(t))
    assert trace.main(["timeline", str(path), "--block", "2"]) == 0
    assert "Timeline of block 2" in capsys.readouterr().out
    assert trace.main(["timeline", str(path), "--block", "2", "--waves"]) == 0
    assert "    wave 1: dispatch.copy" in capsys.readouterr().out


def late_trace(runs=4):
    """Combine runs 100 us apart on 2 ranks of 4 blocks, every block starting at the run's start.
    Each block's route ends 1 us in, block 0's 2.5 us in (rank 0: every run; rank 1: runs 0 and 1
    of 4); blocks 1-3 reduce until 6, 6 and 6.2 us, block 3's kernel (8 us) outlasting the others'
    (7 us). Block 2 ran no reduce in run 0."""
    ranks = fake_ranks(2)
    base = 1_000_000_000
    for run in range(runs):
        s = base + run * 100_000
        for fr in ranks:
            for block in range(4):
                for wave in range(WAVES):
                    fr.add(block, wave, "combine", s, s + (8_000 if block == 3 else 7_000))
                late = block == 0 and (fr.rank == 0 or run < 2)
                fr.add(block, 0, "combine.route", s + 100, s + (2_500 if late else 1_000), 1)
                if block > 0 and not (block == 2 and run == 0):
                    fr.add(block, 0, "combine.reduce", s + 3_000, s + (6_200 if block == 3 else 6_000), 1)
    return trace.build_trace(dumps_of(ranks, base, blocks=4), NAMES, ARGS)


def test_late_blocks_over_every_run(capsys, tmp_path):
    t = late_trace()
    text = trace.late(t, "combine")
    rank0, rank1 = text.split("rank 1:")
    # rank 0: block 0's route ends 1.5 us after the median of (2.5, 1, 1, 1) in all 4 runs
    assert "4 run(s); the kernel's last block: block 3 in 4" in rank0
    assert re.search(r"route +block +0 +1\.50 / +1\.50 / +1\.50 +\(late in 4 of 4 runs\)", rank0)
    # rank 1: late in 2 of 4 runs (0 us in the others): half the runs is enough, its median lateness 0.75
    assert re.search(r"route +block +0 +0\.00 / +0\.75 / +1\.50 +\(late in 2 of 4 runs\)", rank1)
    # block 3's reduce is 0.2 us behind: under the threshold, listed with a lower one, over 3 runs: run 0's
    # reduce ran on two blocks, too few to compare
    assert "reduce" not in text
    low = trace.late(t, "combine", threshold_us=0.1)
    assert re.search(r"reduce +block +3 +0\.20 / +0\.20 / +0\.20 +\(late in 3 of 3 runs\)", low)
    assert "rank 0: no run of dispatch" in trace.late(t, "dispatch")
    assert "route" not in trace.late(t, "combine", threshold_us=2.0) and "  none" in trace.late(t, "combine", 2.0)
    assert trace.late(t, "combine", top=0).count("block    0") == 0
    path = tmp_path / "t.json"
    path.write_text(json.dumps(t))
    assert trace.main(["late", str(path), "--kernel", "combine", "--threshold", "1"]) == 0
    out = capsys.readouterr().out
    assert "ends 1.0 us or more" in out and "late in 4 of 4 runs" in out and "late in 2 of 4 runs" in out


def test_save_gathers_builds_and_writes_on_rank_0(monkeypatch, tmp_path):
    """save(): every rank's dump gathered over the AllToAll's group, one trace built and written by
    rank 0 (None elsewhere); without an argument, the last AllToAll registered with profile=True.
    The group and the extension are stand-ins here (the GPU suite's test_profiler.py runs both)."""
    import moe_a2a._collective as collective
    import moe_a2a._ext as ext_module
    from moe_a2a.trace import build as trace_build

    dumps = make_dumps(world=2)
    gathered = []

    class StandInAllToAll:
        rank, group, device = 0, "the group", "cpu"

        def profile_collect(self):
            return dumps[self.rank]

    class EventNames:
        def profiler_event_names(self):
            return NAMES

        def profiler_event_arg_names(self):
            return ARGS

    def all_gather(mine, group, device):
        gathered.append((mine, group, device))
        return dumps

    monkeypatch.setattr(collective, "all_gather", all_gather)
    monkeypatch.setattr(ext_module, "ext", EventNames)
    monkeypatch.setattr(trace_build, "_active", None)
    with pytest.raises(RuntimeError, match="no AllToAll"):
        trace.save(tmp_path / "none.json")
    ep = StandInAllToAll()
    trace_build._register(ep)
    written = trace.save(tmp_path / "t.json")
    assert gathered == [(dumps[0], "the group", "cpu")]
    assert written == trace.build_trace(dumps, NAMES, ARGS)
    assert trace.load(tmp_path / "t.json") == json.loads(json.dumps(written))
    assert trace.check(written) == []
    ep.rank = 1
    assert trace.save(tmp_path / "other.json", ep) is None
    assert not (tmp_path / "other.json").exists()
