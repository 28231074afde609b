"""scaffold.py: its arguments, cases and files.

CPU only (no GPU, no second rank): python -m pytest benchmarks/tests
"""

import json
import os

import common
import pytest
import torch


def test_scaffold_arguments():
    """The shared options keep their flags and defaults, and the list and size parsers turn bad
    text into an argparse error naming the flag."""
    import scaffold

    p = scaffold.parser("doc")
    scaffold.add_out(p)
    scaffold.add_layout(p, "packed")
    scaffold.add_iters(p, 50)
    scaffold.add_warmup(p, 5)
    scaffold.add_seed(p)
    scaffold.add_switch(p, "--check", "verify")
    scaffold.add_no_microbench(p)
    a = p.parse_args([])
    assert a.out == os.path.join(common.BENCH_DIR, "results") and a.layout == "packed"
    assert (a.iters, a.warmup, a.seed, a.check, a.no_microbench) == (50, 5, 0, True, False)
    a = p.parse_args(["--no-check", "--layout", "padded", "--no-microbench"])
    assert not a.check and a.layout == "padded" and a.no_microbench
    with pytest.raises(SystemExit):
        p.parse_args(["--layout", "ragged"])
    assert scaffold.ints(p, "--tokens", "1, 8,") == [1, 8]
    assert scaffold.sizes(p, "--shape", "256,8,7168", ("experts", "topk", "hidden")) == [256, 8, 7168]
    assert scaffold.names(p, "--systems", "nccl, moe_a2a", ("nccl", "moe_a2a")) == ["nccl", "moe_a2a"]
    for bad in (
        lambda: scaffold.ints(p, "--tokens", "1,x"),
        lambda: scaffold.ints(p, "--tokens", "0"),
        lambda: scaffold.ints(p, "--tokens", ""),
        lambda: scaffold.sizes(p, "--shape", "256,8", ("experts", "topk", "hidden")),
        lambda: scaffold.sizes(p, "--shape", "256,0,7168", ("experts", "topk", "hidden")),
        lambda: scaffold.names(p, "--systems", "deepep", ("nccl",)),
        lambda: scaffold.names(p, "--systems", ",", ("nccl",)),
        lambda: scaffold.at_least(p, a, iters=51),
        lambda: scaffold.at_least(p, a, warmup=6),
    ):
        with pytest.raises(SystemExit):
            bad()
    scaffold.at_least(p, a, iters=50, warmup=0)  # at the minimum: no error
    a.dtype_t, a.shape_list = torch.bfloat16, [common.Shape(8, 2, 64, 4)]
    s = scaffold.settings(a, without=("shape_list",))
    assert s["dtype_t"] == "torch.bfloat16" and "shape_list" not in s and s["iters"] == 50
    json.dumps(s)  # every value as JSON


def test_scaffold_cases_and_files(tmp_path, capsys):
    """run_cases: the rows in case order, rank 0 alone prints the headers and runs after();
    write_results: OUT/stem.json with the document and OUT/stem.csv with its rows."""
    import types

    import scaffold

    seen = []
    for rank in (0, 1):
        ctx = types.SimpleNamespace(rank=rank)
        rows = scaffold.run_cases(
            ctx,
            [1, 2],
            lambda t: [{"tokens": t, "us": 10.0 * t}, {"tokens": t, "us": 1.0}],
            header=lambda t: f"== T={t}",
            after=lambda rows, new: seen.append((rank, len(rows), new[0]["tokens"])),
        )
        assert [r["tokens"] for r in rows] == [1, 1, 2, 2]
    assert seen == [(0, 2, 1), (0, 4, 2)]
    assert capsys.readouterr().out == "== T=1\n== T=2\n"
    assert scaffold.run_cases(types.SimpleNamespace(rank=0), [], lambda c: [c]) == []
    doc = {"meta": {"m": 1}, "config": {"iters": 50}, "rows": rows}
    path = scaffold.write_results(str(tmp_path / "out"), "bench_x", doc)
    assert path == str(tmp_path / "out" / "bench_x")
    assert json.load(open(path + ".json")) == doc and open(path + ".csv").readline().strip() == "tokens,us"
    assert capsys.readouterr().out == f"wrote {path}.json/.csv\n"
    scaffold.write_results(str(tmp_path), "quiet", doc, say=False)
    assert capsys.readouterr().out == "" and os.path.exists(tmp_path / "quiet.csv")
    plt = common.pyplot()
    if plt is not None:
        fig, ax = plt.subplots()
        ax.plot([1, 2], [3, 4])
        scaffold.save_figure(plt, fig, str(tmp_path / "png" / "p.png"), rect=(0, 0, 1, 0.9))
        assert os.path.getsize(tmp_path / "png" / "p.png") > 0
