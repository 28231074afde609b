#!/usr/bin/env python3
"""A run's numbers as the markdown of docs/performance.md and the issues' closing notes
use: every target of benchmarks/targets.py with its measured value (read from the rows where every
rank had the shape's max tokens, counts "max"), issue 40's training rounds (LAYER_TARGETS, from
bench_moe_layer.json: step `layer`), then the graph table, then, when the run has
other per-rank counts (bench_graph.py --counts), each unequal spec's graph d+c next to the equal
pair at its larger count, and the "drawn" rows next to "max".

    python benchmarks/perf_report.py OUT_DIR [--out OUT_DIR/perf_report.md]

OUT_DIR is what tools/gpu_run.sh left (bench_graph.json from step `graph`, fp8/bench_graph.json
from step `fp8`, bench_moe_layer.json from step `layer`); a file that is not there is reported as
not measured. Needs no GPU.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fmt  # noqa: E402
from targets import LAYER_SOURCE, LAYER_TARGETS, TARGETS  # noqa: E402


def load(results_dir: str, name: str):
    path = os.path.join(results_dir, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def is_fp8_row(row) -> bool:
    """bench_graph.py names an fp8 row's dispatch_dtype after --fp8 (e4m3fn, e4m3fnuz); older
    files have no dispatch_dtype (every row in the token dtype)."""
    return str(row.get("dispatch_dtype", "")).startswith(("e4m3", "e5m2", "float8"))


def counts_of(row) -> str:
    """The row's per-rank counts spec (bench_graph.py --counts); rows from before --counts had
    every rank at the shape's max tokens: "max"."""
    return row.get("counts") or "max"


def label(row) -> str:
    """The shape, plus the counts spec unless it is "max"."""
    c = counts_of(row)
    return row["shape"] if c == "max" else f"{row['shape']} {c}"


def find_row(result, target):
    """The row a target reads: its shape and counts spec, and its fp8 format or else a
    token-dtype row."""
    for row in (result or {}).get("rows", []):
        if row.get("shape") != target.shape or counts_of(row) != target.counts:
            continue
        if row.get("dispatch_dtype") == target.dispatch_dtype if target.dispatch_dtype else not is_fp8_row(row):
            return row
    return None


def spread(row, field):
    """ " (p10-p90)" when the row has them for this median."""
    if not field.endswith("_median"):
        return ""
    base = field[: -len("median")]
    lo, hi = row.get(base + "p10"), row.get(base + "p90")
    return "" if lo is None or hi is None else f" ({fmt(lo)}-{fmt(hi)})"


def target_lines(results_dir: str):
    lines = ["| target | measured | bound | met |", "|---|---|---|---|"]
    met = total = 0
    for t in TARGETS:
        row = find_row(load(results_dir, t.source), t)
        value = None if row is None else row.get(t.field)
        total += 1
        digits = 2 if t.unit == "x" else 1
        if value is None:
            lines.append(f"| {t.what} | not measured ({t.source}) | {fmt(t.bound, digits)} {t.unit} | - |")
            continue
        ok = value <= t.bound
        met += ok
        lines.append(
            f"| {t.what} | {fmt(value, digits)}{spread(row, t.field)} {t.unit} | {fmt(t.bound, digits)} {t.unit} | "
            f"{'yes' if ok else 'no'} |"
        )
    return lines, met, total


def layer_value(result, t):
    """A LayerTarget's ratio in a bench_moe_layer.json, or None where either phase did not run."""
    rows = {
        r["phase"]: r for r in (result or {}).get("rows", []) if r.get("tokens") == t.tokens and counts_of(r) == "max"
    }
    num, den = rows.get(t.phase, {}).get(t.field), rows.get(t.over, {}).get(t.over_field)
    return num / den if num is not None and den else None


def layer_target_lines(result):
    """Issue 40's targets (LAYER_TARGETS) in a bench_moe_layer.json (None: not there), as
    target_lines gives issue 35's."""
    lines = ["| target | measured | bound | met |", "|---|---|---|---|"]
    met = 0
    for t in LAYER_TARGETS:
        value = layer_value(result, t)
        if value is None:
            lines.append(f"| {t.what} | not measured ({LAYER_SOURCE}) | {fmt(t.bound, 2)} x | - |")
            continue
        met += value <= t.bound
        lines.append(f"| {t.what} | {fmt(value, 2)} x | {fmt(t.bound, 2)} x | {'yes' if value <= t.bound else 'no'} |")
    return lines, met, len(LAYER_TARGETS)


def graph_lines(result):
    heads = ["shape (E-K-H-T)", "graph d+c us (p10-p90)", "graph pipeline", "SoL d+c", "x SoL"]
    heads += ["eager dispatch", "eager combine"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in result.get("rows", []):
        if is_fp8_row(r):
            continue
        lines.append(
            f"| {label(r)} | {fmt(r['graph_us_median'])}{spread(r, 'graph_us_median')} | "
            f"{fmt(r.get('graph_pipeline_us_median'))} | {fmt(r.get('sol_us'))} | {fmt(r.get('graph_x_sol'), 1)} | "
            f"{fmt(r.get('eager_dispatch_us_median'))} | {fmt(r.get('eager_combine_us_median'))} |"
        )
    return lines


def _same_run(a, b) -> bool:
    """Same shape and dispatch dtype."""
    return a["shape"] == b["shape"] and a.get("dispatch_dtype") == b.get("dispatch_dtype")


def _rank_counts(row):
    """The per-rank token counts a fixed-counts row ran ("rank_tokens"; else from its spec, or
    the shape's max for "max"), or None for "drawn"."""
    c = counts_of(row)
    if c == "drawn":
        return None
    if row.get("rank_tokens") is not None:
        return [int(n) for n in row["rank_tokens"]]
    return [int(row.get("tokens", 0))] if c == "max" else [int(n) for n in c.split("/")]


def _equal_row(rows, row, count):
    """The row of the same shape and dispatch dtype where every rank had `count` tokens: an
    "a/a" spec first, else "max" when count is the shape's max."""
    equal = [r for r in rows if _same_run(r, row) and set(_rank_counts(r) or [None]) == {count}]
    return next((r for r in equal if counts_of(r) != "max"), equal[0] if equal else None)


def unequal_lines(rows):
    """Markdown: per shape, each unequal counts spec's graph d+c median next to the equal pair
    at its larger count (ratio = unequal / equal), and the "drawn" rows next to the shape's
    "max" row. [] when the rows have no unequal or drawn spec."""
    heads = ["shape", "counts", "graph d+c us (p10-p90)", "equal pair", "equal us", "ratio"]
    lines = []
    for r in rows:
        c = counts_of(r)
        if c == "max":
            continue
        if c == "drawn":
            ref = next((q for q in rows if counts_of(q) == "max" and _same_run(q, r)), None)
            counts = f"drawn ({'/'.join(fmt(t) for t in r.get('rank_tokens', []))})"
        else:
            used = _rank_counts(r)
            if len(set(used)) == 1:
                continue  # an equal pair: what the unequal ones are set against
            ref, counts = _equal_row(rows, r, max(used)), c
        shape = r["shape"] + (f" {r['dispatch_dtype']}" if is_fp8_row(r) else "")
        ref_us = None if ref is None else ref.get("graph_us_median")
        ratio = r["graph_us_median"] / ref_us if ref_us else None
        lines.append(
            f"| {shape} | {counts} | {fmt(r['graph_us_median'])}{spread(r, 'graph_us_median')} | "
            f"{'-' if ref is None else counts_of(ref)} | {fmt(ref_us)} | {fmt(ratio, 2)} |"
        )
    if not lines:
        return []
    return ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)] + lines


def describe_run(result) -> str:
    m = (result or {}).get("meta", {})
    dirty = " (uncommitted changes)" if m.get("git_dirty") else ""
    return (
        f"{m.get('date', '?')}, {m.get('gpu_name', '?')} x {m.get('world_size', '?')}, commit "
        f"{str(m.get('git_commit', '?'))[:10]}{dirty}, torch {m.get('torch', '?')}, driver {m.get('driver', '?')}"
    )


def report(results_dir: str) -> str:
    graph = load(results_dir, "bench_graph.json")
    targets, met, total = target_lines(results_dir)
    out = [f"Run: {describe_run(graph)}", "", f"Targets met: {met} of {total}", ""] + targets
    layer_run = load(results_dir, LAYER_SOURCE)
    layer, layer_met, layer_total = layer_target_lines(layer_run)
    world = next((r.get("world") for r in (layer_run or {}).get("rows", [])), None)
    where = f"{LAYER_SOURCE}, world {world}" if world else LAYER_SOURCE
    out += ["", f"Training rounds (issue 40; {where}), targets met: {layer_met} of {layer_total}", ""] + layer
    if graph is not None:
        out += ["", "CUDA-graph steady state and eager (bench_graph.json, token dtype rows):", ""] + graph_lines(graph)
        unequal = unequal_lines(graph.get("rows", []))
        if unequal:
            out += ["", "Unequal counts: graph d+c (us) next to the equal pair at the larger count:", ""] + unequal
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results_dir")
    p.add_argument("--out", help="also write the markdown here")
    args = p.parse_args(argv)
    text = report(args.results_dir)
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
