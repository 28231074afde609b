"""Per block of one combine_backward trace (bench_moe_layer --trace, one run): when its sends end,
its own rows' answers start and end, its wait for the peers' groups ends, and its peers' answers
start and end, us from the rank's first record. Usage: python3 blocks.py TRACE.json [RANK]."""

import collections
import json
import sys


def spans(path, rank):
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X" and e["pid"] == rank + 1]
    t0 = min(e["ts"] for e in events)
    blocks = collections.defaultdict(dict)

    def widen(b, key, start, end):
        s, e = blocks[b].get(key, (start, end))
        blocks[b][key] = (min(s, start), max(e, end))

    for e in events:
        name, b = e["name"], e["args"]["block"]
        start, end = e["ts"] - t0, e["ts"] + e["dur"] - t0
        if name == "combine_backward.send":
            widen(b, "send", start, end)
        elif name == "combine_backward.wait":
            widen(b, "wait", start, end)
        elif name == "combine_backward.answer":
            widen(b, "own" if e["args"]["source"] == rank else "peers", start, end)
    return blocks


def quantiles(values):
    v = sorted(values)
    return " ".join(f"{v[int(q * (len(v) - 1))]:.1f}" for q in (0, 0.1, 0.5, 0.9, 1))


if __name__ == "__main__":
    path, rank = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    blocks = spans(path, rank)
    rows = sorted(blocks.items(), key=lambda kv: kv[1]["own"][1])
    print(f"{path}, rank {rank}: min / p10 / p50 / p90 / max over its {len(rows)} blocks, us")
    print("  sends end        ", quantiles(v["send"][1] for _, v in rows if "send" in v))
    print("  own answers end  ", quantiles(v["own"][1] for _, v in rows))
    print("  peers' start     ", quantiles(v["peers"][0] for _, v in rows))
    print("  own end -> peers'", quantiles(v["peers"][0] - v["own"][1] for _, v in rows))
    print("  peers' duration  ", quantiles(v["peers"][1] - v["peers"][0] for _, v in rows))
    print("  peers' end       ", quantiles(v["peers"][1] for _, v in rows))
    print("every 8th block by its own answers' end, and the last 4:")
    print("  block  sends end  own start  own end  wait end  peers start  peers end")
    for b, v in rows[::8] + rows[-4:]:
        print(
            f"  {b:5d}  {v.get('send', (0, -1))[1]:9.1f}  {v['own'][0]:9.1f}  {v['own'][1]:7.1f}  "
            f"{v.get('wait', (0, -1))[1]:8.1f}  {v['peers'][0]:11.1f}  {v['peers'][1]:9.1f}"
        )
