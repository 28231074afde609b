#!/usr/bin/env python3
"""Several runs of one benchmark side by side, for before/after comparisons (tools/graph_ab.sh writes
one run per source tree). Needs no GPU.
- bench_graph.json runs: per shape (and per-rank counts spec, bench_graph.py --counts), each run's
  graph steady-state median (p10-p90) dispatch + combine time and its ratio to the first run's.
- bench_host.json runs: per call, each run's host time in units of a torch.add timed in the same
  iteration ("x add", the number that survives a host's drift), its median us, and the ratio of
  "x add" to the first run's.
- bench_moe_layer.json runs: per token count (and counts spec) and phase, each run's median (p10-p90)
  device time and its ratio to the first run's.

    python benchmarks/compare_graph.py BASE.json OTHER.json [...] [--names base,other,...] [--out FILE.md]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fmt  # noqa: E402


def load_rows(path):
    with open(path) as f:
        return json.load(f)["rows"]


def side_by_side(runs, names, key_columns, value, cell, cell_label):
    """Markdown: one line per key of the first run ({key tuple: row}): the key, per run cell(row)
    (or "-"), then per run but the first value(row) / value(first run's row)."""
    head = "| " + " | ".join(key_columns) + " | " + " | ".join(f"{n} {cell_label}" for n in names) + " | "
    head += " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |"
    lines = [head, "|" + "---|" * (len(key_columns) + 2 * len(names) - 1)]
    for key, base in runs[0].items():
        rows = [run.get(key) for run in runs]
        rows = [r if r is not None and value(r) is not None else None for r in rows]
        cells = [cell(r) if r is not None else "-" for r in rows]
        ratios = [value(r) / value(base) if r is not None and rows[0] is not None else None for r in rows[1:]]
        ratio_cells = " | ".join(fmt(x, 3) for x in ratios)
        lines.append("| " + " | ".join(key) + " | " + " | ".join(cells) + " | " + ratio_cells + " |")
    return "\n".join(lines)


def compare(paths, names):
    """bench_graph.json runs: one line per shape (and per-rank counts spec other than "max", and
    fp8 dispatch dtype) of the first run."""

    def label(r):
        dtype = r.get("dispatch_dtype", "")
        counts = r.get("counts") or "max"
        return (
            r["shape"]
            + (f" {counts}" if counts != "max" else "")
            + (f" {dtype}" if dtype and dtype not in ("bfloat16", "bf16") else "")
        )

    def cell(r):
        return f"{fmt(r['graph_us_median'])} ({fmt(r['graph_us_p10'])}-{fmt(r['graph_us_p90'])})"

    runs = [{(label(r),): r for r in load_rows(p)} for p in paths]
    return side_by_side(runs, names, ["shape"], lambda r: r.get("graph_us_median"), cell, "us (p10-p90)")


def compare_host(paths, names):
    """bench_host.json runs: one line per (shape, sequence, call) of the first run."""

    def cell(r):
        return f"{r['per_add']:.2f} ({fmt(r['median'])})"

    runs = [{(r["shape"], r["sequence"], r["call"]): r for r in load_rows(p)} for p in paths]
    return side_by_side(runs, names, ["shape", "sequence", "call"], lambda r: r["per_add"], cell, "x add (us)")


def compare_layer(paths, names):
    """bench_moe_layer.json runs: one line per (T, counts spec other than "max", phase) of the first run;
    a phase that failed there ("status" an error, no median) shows "-"."""

    def case(r):
        counts = r.get("counts") or "max"
        return str(r["tokens"]) + (f" {counts}" if counts != "max" else "")

    def cell(r):
        return f"{fmt(r['us_median'])} ({fmt(r['us_p10'])}-{fmt(r['us_p90'])})"

    runs = [{(case(r), r["phase"]): r for r in load_rows(p)} for p in paths]
    return side_by_side(runs, names, ["T/rank", "phase"], lambda r: r.get("us_median"), cell, "us (p10-p90)")


def run_kind(path):
    """ "host", "layer" or "graph": which benchmark wrote the run (by its rows' fields)."""
    rows = load_rows(path)
    if rows and "per_add" in rows[0]:
        return "host"
    if rows and "phase" in rows[0] and "shape" not in rows[0]:
        return "layer"
    return "graph"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "runs",
        nargs="+",
        help="bench_graph.json, bench_host.json or bench_moe_layer.json files, one kind; the first is the base",
    )
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
    kinds = {run_kind(r) for r in args.runs}
    if len(kinds) != 1:
        p.error(f"the runs mix the outputs of different benchmarks ({', '.join(sorted(kinds))})")
    table = {"host": compare_host, "layer": compare_layer, "graph": compare}[kinds.pop()](args.runs, names)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
