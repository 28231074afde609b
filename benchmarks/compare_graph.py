#!/usr/bin/env python3
"""Graph steady state of several bench_graph.py runs side by side: per shape, each run's median
(p10-p90) dispatch + combine time and its ratio to the first run's. For before/after comparisons
of a kernel change (tools/graph_ab.sh writes one run per source tree). Needs no GPU.

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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+", help="bench_graph.json files; the first is the base")
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
    table = compare(args.runs, names)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
