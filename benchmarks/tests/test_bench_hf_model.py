"""bench_hf_model.py: its arguments and sizing, that the model is MoE-dominated, its inputs and report.

CPU only (no GPU, no second rank): python -m pytest benchmarks/tests
"""

import os
import tempfile

import common
import pytest
import torch


def test_hf_model_bench_cli_and_sizing():
    import bench_hf_model as bh

    a = bh.parse_args([])
    assert a.batch_list == [1, 8, 64] and a.system_list == list(bh.SYSTEMS) and a.check
    assert a.model_table == bh.MODEL and (a.prompt_len, a.decode_steps, a.preroll_us) == (64, 50, 20000.0)
    s = bh.parse_args(["--smoke", "--decode-steps", "7"])
    assert s.model_table == bh.SMOKE_MODEL and (s.prompt_len, s.prefill_iters, s.decode_steps) == (16, 2, 7)
    m = bh.parse_args(
        ["--model", "hidden_size=1024, n_routed_experts=32", "--systems", "one_gpu,moe_a2a", "--batches", "2,4"]
    )
    t = m.model_table
    assert (t["hidden_size"], t["n_routed_experts"], t["num_experts_per_tok"]) == (1024, 32, 8)
    assert m.system_list == ["one_gpu", "moe_a2a"] and m.batch_list == [2, 4]
    u = bh.parse_args(["--batches", "1:8, 8,64:1:2"])
    assert u.batch_list == ["1:8", 8, "64:1:2"] and u.most_per_rank == 64
    assert bh.rank_counts("1:8", 3) == [1, 8, 1] and bh.rank_counts(8, 2) == [8, 8]
    assert bh.rank_counts("64:1:2", 2) == [64, 1]
    assert sorted(u.batch_list, key=bh.batch_key) == ["1:8", 8, "64:1:2"]
    # the prompt, then both decode series (with their warm-up) fit the position table
    assert m.max_positions >= m.prompt_len + 2 * m.warmup + m.decode_steps + m.wall_iters
    for bad in (
        ["--batches", "0"],
        ["--batches", "0:8"],  # a rank with no sequences: not offered
        ["--batches", "1:x"],
        ["--batches", ","],
        ["--batches", "65"],  # 65 x 64 prompt tokens > moe_a2a's 4096 per rank and forward
        ["--batches", "1:65"],
        ["--prompt-len", "65"],
        ["--systems", "vllm"],
        ["--model", "width=3"],
        ["--model", "num_experts_per_tok=x"],
        ["--model", "hidden_size=100"],
        ["--model", "topk_group=9"],
        ["--model", "num_experts_per_tok=40,topk_group=4"],  # more than the experts of 4 groups of 8
        ["--model", "first_k_dense_replace=4"],
        ["--decode-steps", "0"],
    ):
        with pytest.raises(SystemExit):
            bh.parse_args(bad)
    # every rank the same number of experts, n_group equal groups of >= 2
    assert [bh.experts_for_world(64, w, 8) for w in range(2, 9)] == [64, 72, 64, 80, 72, 112, 64]
    assert (bh.experts_for_world(8, 2, 8), bh.experts_for_world(16, 2, 4)) == (16, 16)
    kw = bh.config_kwargs(bh.MODEL, 3, 200)
    assert (kw["n_routed_experts"], kw["num_experts_per_tok"], kw["max_position_embeddings"]) == (72, 8, 200)


def test_hf_model_bench_model_is_moe_dominated():
    """The module docstring's arithmetic, on a meta-device build of the real transformers model:
    the routed experts are 86% of the default model's weights."""
    transformers = pytest.importorskip("transformers")
    import bench_hf_model as bh

    for table, share in ((bh.MODEL, 0.85), (bh.SMOKE_MODEL, 0.5)):
        cfg = transformers.DeepseekV3Config(**bh.config_kwargs(table, 2, 256))
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        experts, total = bh.weight_split(model)
        moe_layers = table["num_hidden_layers"] - table["first_k_dense_replace"]
        per_layer = table["n_routed_experts"] * 3 * table["hidden_size"] * table["moe_intermediate_size"] * 2
        assert experts == moe_layers * per_layer
        assert experts / total > share, (experts, total)


def test_hf_model_bench_inputs_and_report():
    import types

    import bench_hf_model as bh
    import scaffold

    args = bh.parse_args(["--smoke", "--batches", "1,4"])
    world, views = 3, []
    for rank in range(world):
        ctx = types.SimpleNamespace(rank=rank, world=world, device=torch.device("cpu"))
        views.append(bh.Inputs(ctx, args, vocab=50))
    everyone = views[0].prompts_for(4, own=False)
    assert everyone.shape == (world * 4, args.prompt_len)
    for rank, v in enumerate(views):  # the same draw on every rank; rank r owns rows r*B .. r*B+B-1
        assert torch.equal(v.prompts_for(4, own=False), everyone)
        assert torch.equal(v.prompts_for(4, own=True), everyone[rank * 4 : rank * 4 + 4])
        assert torch.equal(v.step_for(2, 4, own=True), v.step_for(2, 4, own=False)[rank * 4 : rank * 4 + 4])
    assert views[0].steps.shape[0] == 2 * args.warmup + args.decode_steps + args.wall_iters
    # unequal: "1:4" at world 3 is 1, 4, 1 sequences; the whole batch is rank 0's, rank 1's, rank 2's
    args = bh.parse_args(["--smoke", "--batches", "1:4"])
    views = [
        bh.Inputs(types.SimpleNamespace(rank=r, world=world, device=torch.device("cpu")), args, 50) for r in range(3)
    ]
    everyone = views[0].prompts_for("1:4", own=False)
    assert everyone.shape == (6, args.prompt_len)
    for rank, (first, n) in enumerate(((0, 1), (1, 4), (5, 1))):
        assert torch.equal(views[rank].prompts_for("1:4", own=True), everyone[first : first + n])
        assert torch.equal(
            views[rank].step_for(1, "1:4", own=True), views[0].step_for(1, "1:4", own=False)[first : first + n]
        )
        assert torch.equal(views[rank].prompts_for("1:4", own=True), views[rank].prompts_for(4, own=True)[:n])

    def row(system, batch, prefill_us, decode_us):
        r = {"system": system, "batch_per_rank": batch, "status": "ok", "check": "pass (1.0e-03)", "peak_gib": 1.0}
        for key, us in (("prefill_us", prefill_us), ("prefill_wall_us", prefill_us * 2)):
            r.update(bh.stat_fields(key, [us * 0.9, us, us * 1.1]))
        for key, us in (("decode_us", decode_us), ("decode_wall_us", decode_us * 2)):
            r.update(bh.stat_fields(key, [us] * 5))
        seqs = sum(bh.rank_counts(batch, 2))
        r["prefill_tok_s"] = bh.per_second(seqs * 64, r["prefill_us_median"])
        r["decode_seq_s"] = bh.per_second(seqs, r["decode_us_median"])
        return r

    rows = [
        row("one_gpu", 1, 4000.0, 2000.0),
        row("moe_a2a", 1, 1000.0, 1000.0),
        row("hf_ep", 1, 2000.0, 1500.0),
        row("moe_a2a", 8, 2000.0, 1000.0),
        {"system": "hf_ep", "batch_per_rank": 8, "status": "error: RuntimeError: out of memory"},
        row("moe_a2a", "1:8", 1000.0, 1000.0),
    ]
    assert rows[1]["prefill_tok_s"] == pytest.approx(128 / 1e-3) and bh.per_second(5, 0.0) != bh.per_second(5, 0.0)
    sp = bh.speedups(rows)
    assert sp[0] == {
        "batch_per_rank": 1,
        "prefill_vs_hf_ep": pytest.approx(2.0),
        "decode_vs_hf_ep": pytest.approx(1.5),
        "prefill_vs_one_gpu": pytest.approx(4.0),
        "decode_vs_one_gpu": pytest.approx(2.0),
    }
    assert sp[1] == {"batch_per_rank": "1:8"} and sp[2] == {"batch_per_rank": 8}  # nothing to compare with
    table = bh.table_rows(rows)
    assert [line[:2] for line in table] == [
        [1, bh.LABELS["moe_a2a"]],
        [1, bh.LABELS["hf_ep"]],
        [1, bh.LABELS["one_gpu"]],
        ["1:8", bh.LABELS["moe_a2a"]],
        [8, bh.LABELS["moe_a2a"]],
        [8, bh.LABELS["hf_ep"]],
    ]
    assert table[0][2:5] == ["1.00", "0.92-1.08", "128000"] and table[5][2].startswith("error")
    assert {len(line) for line in table} == {len(bh.HEADERS)}
    common.print_table(bh.HEADERS, table)
    common.print_table(bh.SPEEDUP_HEADERS, bh.speedup_rows(sp))
    with tempfile.TemporaryDirectory() as d:
        doc = {"meta": common.metadata(), "rows": rows, "speedups": sp}
        stem = scaffold.write_results(d, "bench_hf_model", doc, say=False)
        assert open(stem + ".csv").readline().startswith("system,batch_per_rank,status")
        assert os.path.getsize(stem + ".json") > 0
