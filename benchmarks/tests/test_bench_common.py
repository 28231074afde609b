"""benchmarks/common.py: statistics, error lines and tables, shape parsing, the shared CLI, the
run metadata and nvidia-smi parsing, the report and its output files.

CPU only (no GPU, no second rank): python -m pytest benchmarks/tests
"""

import os
import sys
import tempfile

import baselines as bl
import common
import numpy as np
import pytest
import torch


def test_quantiles_match_numpy():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 50, 51):
        v = rng.random(n).tolist()
        s = common.summarize(v)
        assert s["median"] == pytest.approx(np.median(v))
        assert s["p10"] == pytest.approx(np.quantile(v, 0.1))
        assert s["p90"] == pytest.approx(np.quantile(v, 0.9))
    assert common.geomean([1, 4, 16]) == pytest.approx(4)


def test_error_line_is_one_line(capsys):
    # A CUDA error's message: one line of what went wrong, then lines of advice (session 46's graph decode).
    cuda = RuntimeError(
        "CUDA error: operation failed due to a previous error during capture\nSearch for ...\nFor debugging"
    )
    assert common.error_line(cuda) == (
        "RuntimeError: CUDA error: operation failed due to a previous error during capture ..."
    )
    assert common.error_line(ValueError("short")) == "ValueError: short"
    assert common.error_line(KeyError()) == "KeyError: "
    long = common.error_line(RuntimeError("x" * 500))
    assert long == "RuntimeError: " + "x" * common.ERROR_LINE_CHARS + " ..."
    assert common.error_status(cuda, "graph decode") == "error: " + common.error_line(cuda)
    assert common.error_status(ValueError("no"), "building nccl", prefix="unsupported") == "unsupported: ValueError: no"
    err = capsys.readouterr().err  # the whole message, for the log
    assert "rank 0: graph decode: RuntimeError: CUDA error" in err and "For debugging" in err
    assert "rank 0: building nccl: ValueError: no" in err


def test_print_table_moves_long_cells_to_notes(capsys):
    cuda = "error: " + common.error_line(RuntimeError("CUDA error: " + "y" * 200))
    common.print_table(["B", "system", "graph ms"], [[1, "(a)", "1.25"], [8, "(b)", cuda], [64, "(b)", cuda]])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == " B  system  graph ms" and lines[1] == "-" * len(lines[0])
    assert lines[2:5] == [" 1     (a)      1.25", " 8     (b)       [1]", "64     (b)       [1]"]
    assert lines[5:] == [f"[1] {cuda}"]  # one note for the two rows of the same error
    short = "x" * common.TABLE_CELL_CHARS  # at the limit: stays in its cell
    common.print_table(["a"], [[short]])
    assert capsys.readouterr().out.splitlines()[2] == short


def test_parse_shapes():
    s = common.parse_shapes(common.CHALLENGE_SHAPES)
    assert [(x.experts, x.topk, x.hidden, x.max_tokens) for x in s] == [
        (8, 2, 6144, 16),
        (64, 6, 2048, 32),
        (128, 4, 2880, 128),
        (128, 8, 4096, 256),
        (256, 8, 7168, 256),
    ]
    assert all(x.dtype == torch.bfloat16 and x.seed == 0 for x in s)
    s = common.parse_shapes("8,2,64,4,fp16,7; 16,4,32,8;", default_seed=3)
    assert (s[0].dtype, s[0].seed, s[1].dtype, s[1].seed) == (torch.float16, 7, torch.bfloat16, 3)
    for bad in ("8,2,64", "8,2,64,4,int8", "8,9,64,4", "8,2,64,0"):
        with pytest.raises(ValueError):
            common.parse_shapes(bad)


def test_cli_parses():
    import bench_all2all
    import bench_sweep

    a = bench_all2all.parse_args(["--systems", "nccl,moe_a2a", "--shapes", "8,2,64,4"])
    assert a.system_list == ["nccl", "moe_a2a"] and a.iters == 50 and a.check
    assert not bench_all2all.parse_args(["--no-check"]).check
    with pytest.raises(SystemExit):
        bench_all2all.parse_args(["--iters", "10"])
    with pytest.raises(SystemExit):
        bench_all2all.parse_args(["--systems", "deepep"])
    assert bench_all2all.parse_args(["--trace", "t", "--trace-fp8", "e4m3fnuz"]).trace_fp8 == "e4m3fnuz"
    assert bench_all2all.parse_args([]).trace_fp8 is None
    with pytest.raises(SystemExit):
        bench_all2all.parse_args(["--trace-fp8", "e5m2"])
    b = bench_sweep.parse_args(["--tokens", "1,8"])
    assert [s.max_tokens for s in b.shape_list] == [1, 8] and b.shape_list[0].experts == 256


def test_metadata_fields():
    m = common.metadata()
    for k in (
        "git_commit",
        "git_dirty",
        "torch",
        "cuda",
        "hip",
        "driver",
        "command",
        "argv",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "gpus_smi",
        "env",
    ):
        assert k in m, k
    assert m["argv"] == sys.argv and m["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert m["env"]["HIP_FORCE_DEV_KERNARG"] == os.environ["HIP_FORCE_DEV_KERNARG"]
    assert isinstance(m["git_dirty"], bool)


def test_smi_parsing(monkeypatch):
    out = "0, 00000000:18:00.0, NVIDIA H200, 570.1, 1980, 1980\n1, 00000000:2A:00.0, NVIDIA H200, 570.1, [N/A], 1980\n"
    monkeypatch.setattr(common, "_run", lambda cmd: out)
    g = common.nvidia_smi_gpus()
    assert [x["clocks.sm"] for x in g] == [1980, None] and g[1]["pci.bus_id"] == "00000000:2A:00.0"
    assert g[0]["name"] == "NVIDIA H200" and g[0]["clocks.max.sm"] == 1980


def test_report_and_outputs():
    import bench_all2all as ba
    import bench_sweep as bs

    rows = []
    for s in ("E8-K2-H64-T4", "E16-K2-H64-T4"):
        for sysname, t in (("nccl", 500.0), ("moe_a2a", 50.0)):
            for ph in ba.PHASES:
                r = {
                    "shape": s,
                    "system": sysname,
                    "phase": ph,
                    "tokens_per_rank": 3.0,
                    "tokens": 4,
                    "status": "ok",
                    "check": "pass",
                    "us_median": t,
                    "us_p10": t * 0.9,
                    "us_p90": t * 1.1,
                    "GBps": 10.0,
                    "x_sol": t / 10,
                    "sol_us": 10.0,
                    "sol_bound": "link",
                    "bytes": 1e5,
                }
                if ph in ba.GRAPH_PHASES and sysname == "moe_a2a":
                    r.update(
                        graph_us_median=t / 2,
                        graph_us_p10=t / 2.2,
                        graph_us_p90=t / 1.8,
                        graph_x_sol=t / 20,
                        graph_sol_us=10.0,
                    )
                elif ph in ba.GRAPH_PHASES:
                    r["graph_status"] = bl.NcclSystem.graph_note
                rows.append(r)
        rows += [
            {
                "shape": s,
                "system": "symm_mem",
                "phase": ph,
                "tokens_per_rank": 3.0,
                "tokens": 4,
                "status": "unsupported: 32 experts/rank > 16",
            }
            for ph in ba.PHASES
        ]
    ba.add_vs_nccl(rows)
    ba.add_floor(rows, {"bytes": 50000, "us": 5.0, "blocks": 32})
    moe = {(r["shape"], r["phase"]): r for r in rows if r["system"] == "moe_a2a"}
    assert moe[("E8-K2-H64-T4", "pipeline")]["vs_nccl"] == pytest.approx(10.0)
    assert moe[("E8-K2-H64-T4", "dispatch+combine")]["graph_x_floor"] == pytest.approx(5.0)
    assert "floor_exchange_us" not in moe[("E8-K2-H64-T4", "dispatch")]
    table = ba.table_rows(rows, harness=True)
    nccl_dc = next(line for line, r in zip(table, rows) if r["system"] == "nccl" and r["phase"] == "dispatch+combine")
    assert "eager only" in nccl_dc and "d+c" in nccl_dc
    assert len({len(line) for line in table}) == 1  # every line as wide as the headers
    assert ba.floor_summary_rows(rows)[0][:5] == ["E8-K2-H64-T4", "0.05", "5.0 (32)", "25.0", "5.00"]
    micro = {"B_GBps": 370.0, "B_source": "test", "L_us": 2.0, "B_hbm_GBps": 4000.0, "B_hbm_source": "test"}
    ba.print_report(rows, micro, harness=True)
    bs.print_report(rows, micro)
    ba.add_floor(rows, {"bytes": 1, "error": "no extension"})  # reported, not raised
    with tempfile.TemporaryDirectory() as d:
        ba.plot(rows, os.path.join(d, "a.png"))
        bs.plot(rows, micro, os.path.join(d, "s.png"))
        common.write_csv(os.path.join(d, "a.csv"), rows)
        common.write_json(os.path.join(d, "a.json"), {"rows": rows, "meta": common.metadata()})
        if common.pyplot() is not None:
            assert os.path.getsize(os.path.join(d, "a.png")) > 0
        assert open(os.path.join(d, "a.csv")).readline().startswith("shape,")
