"""Per-block stages of one rank's backward of combine in a trace (session 18's README tables).

    python3 blocks.py TRACE.json.gz PID [STEP]

PID is the trace's process (1 = rank 0, 2 = rank 1); every STEP-th block is printed. Each column is the stage's
first start and last end over the block's waves, us from the rank's first event, and how many waves recorded it:
send, the own rows' answers (source = this rank), the wait for the peer's group, the peer's rows' answers, the wait
for the weight gradients, the whole kernel.
"""

import collections
import gzip
import json
import sys


def main(path, pid, step=1):
    trace = json.load(gzip.open(path))
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] == pid]
    t0 = min(e["ts"] for e in events)
    me = pid - 1
    blocks = collections.defaultdict(list)
    for e in events:
        blocks[e["args"]["block"]].append((e["name"].split(".")[-1], e["ts"] - t0, e["ts"] - t0 + e["dur"], e["args"]))

    def span(records, keep):
        picked = [r for r in records if keep(r)]
        if not picked:
            return "      -"
        return f"{min(r[1] for r in picked):6.1f}-{max(r[2] for r in picked):6.1f}({len(picked)})"

    stages = [
        ("send", lambda r: r[0] == "send"),
        ("own", lambda r: r[0] == "answer" and r[3]["source"] == me),
        ("wait", lambda r: r[0] == "wait"),
        ("peer", lambda r: r[0] == "answer" and r[3]["source"] != me),
        ("ww", lambda r: r[0] == "wait_weights"),
        ("k", lambda r: r[0] == "combine_backward"),
    ]
    for b in sorted(blocks)[::step]:
        print(b, " ".join(f"{name} {span(blocks[b], keep)}" for name, keep in stages))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
