"""perf_report.py and compare_graph.py: each target next to its measured value, A/B runs side by
side (graph, host, layer), and unequal-count rows in the reports.

CPU only (no GPU, no second rank): python -m pytest benchmarks/tests
"""

import json
import os

import common
import pytest


def test_perf_report_sets_every_target_next_to_its_value(tmp_path):
    """benchmarks/perf_report.py on a stored run (2 x H200, 2026-11-23) and a synthetic fp8 file."""
    import json
    import shutil

    import perf_report
    from targets import TARGETS

    root = common.REPO_ROOT
    shutil.copy(os.path.join(root, "docs/results/2026-11-23-h200x2-transport/bench_graph.json"), tmp_path)
    text = perf_report.report(str(tmp_path))
    assert "Targets met: 0 of %d" % len(TARGETS) in text
    assert "| graph d+c DeepSeek-V3 T=1 | 27.3 (27.3-27.4) us | 12.0 us | no |" in text
    assert "| eager dispatch DeepSeek-V3 T=4096 | 330.3 (328.5-332.2) us | 230.0 us | no |" in text
    # that run has no drawn counts and no floor: those targets are not measured, not failed
    assert "| graph d+c E8-K2-H6144-T16, counts drawn | not measured (bench_graph.json) | 13.0 us | - |" in text
    assert "| graph d+c / in-run floor, DeepSeek-V3 T=4096 | not measured (bench_graph.json) | 1.30 x | - |" in text
    assert "not measured (fp8/bench_graph.json)" in text
    # fp8: the e4m3fn row is read, never the token-dtype row of the same shape, and vice versa.
    (tmp_path / "fp8").mkdir()
    shape = "E256-K8-H7168-T4096"
    rows = [
        {"shape": shape, "dispatch_dtype": "bfloat16", "eager_dispatch_us_median": 300.0},
        {
            "shape": shape,
            "dispatch_dtype": "e4m3fn",
            "eager_dispatch_us_median": 170.0,
            "eager_dispatch_vs_token_dtype": 0.54,
        },
    ]
    (tmp_path / "fp8" / "bench_graph.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    text = perf_report.report(str(tmp_path))
    assert "| fp8 dispatch / bf16 dispatch, DeepSeek-V3 T=4096 (eager) | 0.54 x | 0.55 x | yes |" in text
    assert "Targets met: 1 of" in text


def test_perf_report_sets_the_training_targets_next_to_their_ratios(tmp_path):
    """perf_report.py's issue 40 block on a stored bench_moe_layer.json (4 x H100, 2026-11-27): each round over its
    forward mirror at every T, dispatch's p90 over its p10; a phase that did not run is not measured."""
    import shutil

    import perf_report
    from targets import LAYER_TARGETS

    root = common.REPO_ROOT
    layer = os.path.join(root, "docs/results/2026-11-27-h100x2-session16/call5/layer/bench_moe_layer.json")
    text = perf_report.report(str(tmp_path))  # no layer run: every training target not measured
    assert f"Training rounds (issue 40; bench_moe_layer.json), targets met: 0 of {len(LAYER_TARGETS)}" in text
    unmeasured = "| not measured (bench_moe_layer.json) | 1.10 x | - |"
    assert "| backward of combine / forward dispatch, T=128 " + unmeasured in text
    shutil.copy(layer, tmp_path)
    text = perf_report.report(str(tmp_path))
    assert "Training rounds (issue 40; bench_moe_layer.json, world 4), targets met: 4 of 7" in text
    assert "| backward of combine / forward dispatch, T=2048 | 1.40 x | 1.10 x | no |" in text  # 413.0 / 295.3
    assert "| backward of dispatch / forward combine, T=512 | 1.03 x | 1.10 x | yes |" in text  # 87.0 / 84.6
    assert "| forward dispatch p90 / p10 in the layer, T=128 | 1.03 x | 1.20 x | yes |" in text  # 43.8 / 42.4
    with open(layer) as f:
        run = json.load(f)
    run["rows"] = [r for r in run["rows"] if r["phase"] != "combine"]
    (tmp_path / "bench_moe_layer.json").write_text(json.dumps(run))
    text = perf_report.report(str(tmp_path))
    assert "| backward of dispatch / forward combine, T=512 " + unmeasured in text


def test_compare_graph_sets_runs_side_by_side(tmp_path):
    """benchmarks/compare_graph.py on the stored one-GPU proxy runs (1 x H100, 2026-11-23)."""
    import compare_graph

    root = common.REPO_ROOT
    d = os.path.join(root, "docs/results/2026-11-23-h100-mps-proxy")
    base, a = os.path.join(d, "bench_graph-baseline-run1.json"), os.path.join(d, "bench_graph-variant-a.json")
    text = compare_graph.compare([base, a], ["base", "A"])
    assert text.splitlines()[0] == "| shape | base us (p10-p90) | A us (p10-p90) | A / base |"
    assert "| E256-K8-H7168-T1 | 32.4 (31.6-32.7) | 33.8 (33.3-34.7) | 1.045 |" in text
    assert len(text.splitlines()) == 2 + 7  # head, rule, one line per shape
    out = tmp_path / "c.md"
    assert compare_graph.main([base, a, "--names", "base,A", "--out", str(out)]) == 0
    assert out.read_text().strip() == text
    with pytest.raises(SystemExit):
        compare_graph.main([base, a, "--names", "only-one"])


def test_compare_graph_sets_host_runs_side_by_side(tmp_path):
    """compare_graph.py on bench_host.json runs: "x add" per call and its ratio to the base; the kinds never mix."""
    import compare_graph

    root = common.REPO_ROOT
    base = os.path.join(root, "docs/results/2026-11-25-h100-output-pool/bench_host-x-add.json")
    with open(base) as f:
        other = json.load(f)
    for r in other["rows"]:
        r["per_add"] *= 0.5
    half = tmp_path / "bench_host.json"
    half.write_text(json.dumps(other))
    text = compare_graph.compare_host([base, str(half)], ["base", "B"])
    assert text.splitlines()[0] == "| shape | sequence | call | base x add (us) | B x add (us) | B / base |"
    assert "| E256-K8-H7168-T1 | forward | dispatch | 2.22 (16.6) | 1.11 (16.6) | 0.500 |" in text
    assert len(text.splitlines()) == 2 + len(other["rows"])
    assert compare_graph.main([base, str(half), "--names", "base,B"]) == 0
    graph = os.path.join(root, "docs/results/2026-11-23-h100-mps-proxy/bench_graph-baseline-run1.json")
    with pytest.raises(SystemExit):
        compare_graph.main([base, graph])


def test_compare_graph_sets_layer_runs_side_by_side(tmp_path):
    """compare_graph.py on bench_moe_layer.json runs (2 x H100, 2026-11-27): one line per (T, phase), a failed
    phase "-", the kinds never mix."""
    import compare_graph

    root = common.REPO_ROOT
    d = os.path.join(root, "docs/results/2026-11-27-h100x2-session16/call2/layer")
    base, new = (os.path.join(d, run, "bench_moe_layer.json") for run in ("1-base", "2-new"))
    assert compare_graph.run_kind(base) == "layer"
    text = compare_graph.compare_layer([base, new], ["base", "new"])
    assert text.splitlines()[0] == "| T/rank | phase | base us (p10-p90) | new us (p10-p90) | new / base |"
    assert "| 2048 | combine-bwd | 253.4 (250.4-255.5) | 246.5 (244.1-249.2) | 0.973 |" in text
    assert len(text.splitlines()) == 2 + 3 * 4  # three token counts, four phases
    with open(new) as f:
        failed = json.load(f)
    for r in failed["rows"]:
        if r["phase"] == "hbm-y":
            r.pop("us_median")
            r["status"] = "error: RuntimeError: out of memory"
        r["counts"] = "max"
    path = tmp_path / "bench_moe_layer.json"
    path.write_text(json.dumps(failed))
    text = compare_graph.compare_layer([base, str(path)], ["base", "oom"])
    assert "| 128 | hbm-y | 16.2 (16.0-16.5) | - | - |" in text
    assert compare_graph.main([base, str(path), "--names", "base,oom"]) == 0
    graph = os.path.join(root, "docs/results/2026-11-23-h100-mps-proxy/bench_graph-baseline-run1.json")
    assert compare_graph.run_kind(graph) == "graph"
    with pytest.raises(SystemExit):
        compare_graph.main([base, graph])


def test_unequal_counts_rows_in_the_reports(tmp_path):
    """perf_report and compare_graph: a target reads the row of its own counts spec, never another
    (rows without "counts" are "max"); the unequal table sets each unequal spec against the equal
    pair at its larger count, drawn against max."""
    import compare_graph
    import perf_report

    shape = "E8-K2-H6144-T16"

    def row(counts, us, ranks=None, dtype="bfloat16"):
        r = {"shape": shape, "counts": counts, "tokens": 16, "dispatch_dtype": dtype, "graph_us_median": us}
        r.update(graph_us_p10=us - 1, graph_us_p90=us + 1)
        if ranks is not None:
            r["rank_tokens"] = ranks
        return r

    rows = [
        row("1/16", 35.0, [1, 16]),
        row("0/16", 12.0, [0, 16]),
        row("16/16", 10.0, [16, 16]),
        row("max", 9.0, [16, 16]),
        row("drawn", 18.0, [9.5, 7.25]),
        row("1/1", 8.0, [1, 1]),
        row("4/16", 20.0, [4, 16], dtype="e4m3fn"),
        row("max", 5.0, [16, 16], dtype="e4m3fn"),
    ]
    (tmp_path / "bench_graph.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    text = perf_report.report(str(tmp_path))
    # the drawn row (issue 35's E8 target), not max's 9.0 or an unequal pair's
    assert "| graph d+c E8-K2-H6144-T16, counts drawn | 18.0 (17.0-19.0) us | 13.0 us | no |" in text
    lines = perf_report.unequal_lines(rows)
    assert lines[0] == "| shape | counts | graph d+c us (p10-p90) | equal pair | equal us | ratio |"
    assert lines[2:] == [
        "| E8-K2-H6144-T16 | 1/16 | 35.0 (34.0-36.0) | 16/16 | 10.0 | 3.50 |",
        "| E8-K2-H6144-T16 | 0/16 | 12.0 (11.0-13.0) | 16/16 | 10.0 | 1.20 |",
        "| E8-K2-H6144-T16 | drawn (9.5/7.2) | 18.0 (17.0-19.0) | max | 9.0 | 2.00 |",
        "| E8-K2-H6144-T16 e4m3fn | 4/16 | 20.0 (19.0-21.0) | max | 5.0 | 4.00 |",  # no 16/16 in fp8: max
    ]
    assert "\n".join(lines) in text and "| E8-K2-H6144-T16 1/16 | 35.0" in text
    assert perf_report.unequal_lines([row("max", 9.0)]) == []
    # a file from before --counts: no "counts" key, read as "max" (DeepSeek-V3 T=1's target is a max
    # row); an unequal row alone is not a target
    one = "E256-K8-H7168-T1"
    old = [{k: v for k, v in row("max", 22.8).items() if k not in ("counts", "rank_tokens")}]
    unequal = [row("0/1", 35.0, [0, 1]) | {"shape": one}]
    rows = unequal + [old[0] | {"shape": one}]
    (tmp_path / "bench_graph.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    assert "| graph d+c DeepSeek-V3 T=1 | 22.8 (21.8-23.8) us | 12.0 us | no |" in perf_report.report(str(tmp_path))
    (tmp_path / "bench_graph.json").write_text(json.dumps({"meta": {}, "rows": unequal}))
    assert "| graph d+c DeepSeek-V3 T=1 | not measured" in perf_report.report(str(tmp_path))
    # compare_graph keys a row by its counts too: the max row of an old run matches the new max row
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"rows": old}))
    b.write_text(json.dumps({"rows": [row("1/16", 35.0, [1, 16]), row("max", 11.4, [16, 16])]}))
    table = compare_graph.compare([str(a), str(b)], ["old", "new"])
    assert "| E8-K2-H6144-T16 | 22.8 (21.8-23.8) | 11.4 (10.4-12.4) | 0.500 |" in table
    table = compare_graph.compare([str(b), str(a)], ["new", "old"])
    assert "| E8-K2-H6144-T16 1/16 | 35.0 (34.0-36.0) | - |" in table
