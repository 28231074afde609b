#!/usr/bin/env python3
"""Several runs of one benchmark side by side, for before/after comparisons (tools/graph_ab.sh writes
one run per source tree). Needs no GPU.
- bench_graph.json runs: per shape, each run's graph steady-state median (p10-p90) dispatch +
  combine time and its ratio to the first run's.
- bench_host.json runs: per call, each run's host time in units of a torch.add timed in the same
  iteration ("x add", the number that survives a host's drift), its median us, and the ratio of
  "x add" to the first run's.

    python benchmarks/compare_graph.py BASE.json OTHER.json [...] [--names base,other,...] [--out FILE.md]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fmt  # noqa: E402


def rows_by_shape(path):
    """{(shape, dispatch dtype): row} of one bench_graph.json."""
    with open(path) as f:
        result = json.load(f)
    return {(r["shape"], r.get("dispatch_dtype", "")): r for r in result["rows"]}


def compare(paths, names):
    """Markdown: one line per shape of the first run, one column per run."""
    runs = [rows_by_shape(p) for p in paths]
    head = "| shape | " + " | ".join(f"{n} us (p10-p90)" for n in names) + " | "
    head += " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |"
    lines = [head, "|" + "---|" * (2 * len(names))]  # shape, a time per run, a ratio per run but the first
    for key, base in runs[0].items():
        cells, ratios = [], []
        for run in runs:
            r = run.get(key)
            if r is None or r.get("graph_us_median") is None:
                cells.append("-")
                ratios.append(None)
                continue
            cells.append(f"{fmt(r['graph_us_median'])} ({fmt(r['graph_us_p10'])}-{fmt(r['graph_us_p90'])})")
            ratios.append(r["graph_us_median"] / base["graph_us_median"])
        label = key[0] + (f" {key[1]}" if key[1] and key[1] not in ("bfloat16", "bf16") else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(fmt(x, 3) for x in ratios[1:]) + " |")
    return "\n".join(lines)


def compare_host(paths, names):
    """Markdown: one line per (shape, sequence, call) of the first bench_host.json, one column per run."""
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append({(r["shape"], r["sequence"], r["call"]): r for r in json.load(f)["rows"]})
    head = "| shape | sequence | call | " + " | ".join(f"{n} x add (us)" for n in names) + " | "
    head += " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |"
    lines = [head, "|" + "---|" * (3 + 2 * len(names) - 1)]
    for key, base in runs[0].items():
        cells, ratios = [], []
        for run in runs:
            r = run.get(key)
            if r is None:
                cells.append("-")
                ratios.append(None)
                continue
            cells.append(f"{r['per_add']:.2f} ({fmt(r['median'])})")
            ratios.append(r["per_add"] / base["per_add"])
        lines.append("| " + " | ".join(key) + " | " + " | ".join(cells) + " | " + " | ".join(fmt(x, 3) for x in ratios[1:]) + " |")
    return "\n".join(lines)


def is_host_run(path):
    with open(path) as f:
        rows = json.load(f)["rows"]
    return bool(rows) and "per_add" in rows[0]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+", help="bench_graph.json or bench_host.json files (one kind); the first is the base")
    p.add_argument("--names", help="comma list, one per run (default: the files' folder names)")
    p.add_argument("--out", help="also write the table here")
    args = p.parse_args(argv)
    names = (
        args.names.split(",")
        if args.names
        else [os.path.basename(os.path.dirname(os.path.abspath(r))) for r in args.runs]
    )
    if len(names) != len(args.runs):
        p.error(f"{len(args.runs)} runs but {len(names)} names")
    kinds = {is_host_run(r) for r in args.runs}
    if len(kinds) != 1:
        p.error("the runs mix bench_graph.json and bench_host.json files")
    table = (compare_host if kinds.pop() else compare)(args.runs, names)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
