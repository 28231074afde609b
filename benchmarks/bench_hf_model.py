"""A Hugging Face transformers MoE model served three ways, at the same total batch:

    (a) moe_a2a    data-parallel + expert-parallel on moe_a2a: each rank runs its own B sequences
                   through the replicated model, its MoE layers keep 1/world of the experts, and
                   tokens travel by dispatch and combine (moe_a2a.integrations.transformers)
    (b) hf_ep      transformers' own expert parallelism: every rank runs all world x B sequences,
                   its experts see every token with the slots of other ranks' experts masked,
                   and each MoE layer's output is all-reduced
    (c) one_gpu    one GPU (rank 0) with all experts runs all world x B sequences (transformers'
                   grouped_mm experts); the other ranks wait

    torchrun --nproc-per-node=<N> benchmarks/bench_hf_model.py [--batches 1,8,64,1:8] [--out DIR]
    MOE_A2A_TEST_ONE_GPU=1 torchrun --nproc-per-node=2 benchmarks/bench_hf_model.py --smoke   # one GPU

For each B (sequences per rank; total world x B) and system, after a prefill whose last-token
logits are compared with (c)'s. B may differ between ranks, as a serving engine's ranks' batches
do: "1:8" gives rank r the (r mod 2)-th count, here 1, 8, 1, 8, ...; (b) and (c) then run all
the ranks' sequences (the total), and (a) each rank its own. A rank with none is not offered: it
would have to join each forward's exchange with an empty batch, which moe_tf.generate does and
this benchmark's forwards do not.
    prefill   one forward over the prompts (--prompt-len tokens each, KV cache filled, logits of
              the last position only, as generate() does): device time and tokens/s of the
              whole batch (world x B x prompt-len tokens / time)
    decode    one forward of one new token per sequence on a StaticCache that an eager prefill
              of the prompts filled (random tokens, the cache growing by one per step): device
              time of the step and sequences/s. A StaticCache, not transformers' default
              DynamicCache: on that, each step's new key length cost every attention call ~9 ms
              of host time in scaled_dot_product_attention, the same for every system
              (static_cache_after_prefill says more)
    graph     the same decode step captured in a CUDA graph, as serving engines run decode
              (moe_a2a.integrations.decode_graph.DecodeGraph: a StaticCache filled by an eager
              prefill, the step's kernels, dispatch and combine among them, replayed as one
              graph); --no-graph leaves it out. A system whose step cannot be captured says why
              in the column.
Device time: CUDA events around the call on every rank. Before each call the ranks align (a
tiny all-reduce), L2 is flushed and the GPU busy-waits --preroll-us so the host can queue the
whole step ahead: the events then measure the GPU's work without the host's launch gaps,
unless the step itself waits for the host. "wall" columns are the other view, the host's wall
clock from an idle GPU to the end of the call (synchronize before and after), launch overhead
included: what an eager caller waits for. Both are the max over ranks per iteration, then
median and p10-p90 over iterations (benchmarks/common.py).

How (b) is enabled (transformers >= 5.17, < 6): the full model is built from the config as for
the others, then DistributedConfig(tp_size=world, enable_expert_parallel=True) is applied with
PreTrainedModel.maybe_distribute_model(model, distributed_config, mesh) over a DeviceMesh of the
process group: the step from_pretrained(distributed_config=...) runs before loading weights. It
applies the model's base_model_ep_plan (DeepSeek-V3: ep_router on the router, grouped_gemm on the
expert weights, moe_tp_experts on the experts module); the shard each rank keeps is its own slice
of the weights it built, so all three systems run the same weights.

The model: DeepSeek-V3's layer structure (MLA attention, sigmoid router with grouped top-k, a
shared expert, the first layer dense) at the width of the 16B-class models of that architecture
(Moonlight-16B-A3B: hidden 2048, 64 routed experts): hidden 2048, 64 routed experts (more when
world does not divide them: the next multiple of lcm(world, n_group)), top-8 of 8 groups with 4
picked, expert FFN 1408, 4 layers (1 dense + 3 MoE), vocabulary 32768, random weights (built
from the config; no download). The sizes make the MoE dominate, as in the real models: each MoE
layer holds 64 x 3 x 2048 x 1408 bf16 expert weights (1.03 GiB) against 22 MiB of attention and
16.5 MiB of shared expert; with the dense layer (132 MiB), the embedding and the LM head (128 MiB
each) the experts are 86% of the weights (3.09 of 3.61 GiB, printed at the start). 4 layers keep
(c) on one GPU and the run short; every layer costs the same, so more layers scale the times.
Prefill is 64 tokens per sequence by default, so B=64 feeds moe_a2a its per-rank limit of 4096
tokens per forward.

Output: a table, and bench_hf_model.json / .csv under --out (bench_hf_model_smoke.* with
--smoke). Under MOE_A2A_TEST_ONE_GPU=1 every rank runs on GPU 0 over a gloo group (the GPU
tests' smoke mode): it shows that the script runs, and every time it prints means nothing.
"""

import contextlib
import copy
import gc
import math
import time

import common  # noqa: F401  (first: pins NVLink multicast off before torch.distributed loads)
import scaffold
import torch
import torch.distributed as dist
from common import fmt, summarize

SYSTEMS = ("moe_a2a", "hf_ep", "one_gpu")
LABELS = {
    "moe_a2a": "(a) moe_a2a DP+EP",
    "hf_ep": "(b) transformers EP",
    "one_gpu": "(c) one GPU",
}
# (c) runs first: its logits are the reference the others are checked against.
RUN_ORDER = ("one_gpu", "moe_a2a", "hf_ep")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
MAX_TOKENS_PER_RANK = 4096  # moe_a2a: tokens one rank feeds one MoE layer per forward

# DeepSeek-V3's layer structure at the width of the 16B-class DeepSeek-architecture models
# (the module docstring says why these sizes), in DeepseekV3Config's own names.
MODEL = {
    "hidden_size": 2048,
    "n_routed_experts": 64,  # more when world does not divide them (experts_for_world)
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 1408,
    "n_shared_experts": 1,
    "n_group": 8,
    "topk_group": 4,
    "num_hidden_layers": 4,
    "first_k_dense_replace": 1,  # dense layers first
    "intermediate_size": 11264,  # of the dense layers
    "num_attention_heads": 16,
    "q_lora_rank": 768,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "vocab_size": 32768,
}
SMOKE_MODEL = dict(
    MODEL,
    hidden_size=256,
    n_routed_experts=16,
    num_experts_per_tok=4,
    moe_intermediate_size=128,
    n_group=4,
    topk_group=2,
    num_hidden_layers=2,
    intermediate_size=512,
    num_attention_heads=4,
    q_lora_rank=64,
    kv_lora_rank=64,
    qk_rope_head_dim=32,
    qk_nope_head_dim=32,
    v_head_dim=32,
    vocab_size=512,
)
# Defaults that --smoke changes (each still settable); None in argparse means "this table".
MODE_DEFAULTS = {
    False: dict(prompt_len=64, prefill_iters=20, decode_steps=50, wall_iters=10, warmup=3, preroll_us=20000.0),
    True: dict(prompt_len=16, prefill_iters=2, decode_steps=3, wall_iters=2, warmup=1, preroll_us=1000.0),
}


# ----------------------------------------------------------------------------- pure helpers
def rank_counts(batch, world):
    """Each rank's sequences at one size of --batches: B (an int) on every rank, or "B0:B1:..."
    (a str), rank r holding the (r mod n)-th count."""
    if isinstance(batch, int):
        return [batch] * world
    counts = [int(c) for c in batch.split(":")]
    return [counts[r % len(counts)] for r in range(world)]


def most_sequences(batch):
    """The most sequences any rank holds at one size of --batches."""
    return max(int(c) for c in str(batch).split(":"))


def batch_key(batch):
    """The tables' order of the sizes: by the most sequences a rank holds, then the label."""
    return (most_sequences(batch), str(batch))


def parse_batches(p, text):
    """--batches: B (every rank) or B0:B1:... (per rank, cycled), each count >= 1, or p.error."""
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        try:
            counts = [int(c) for c in item.split(":")]
        except ValueError:
            counts = []
        if not counts or min(counts) < 1:
            p.error(f"--batches: {item!r}: sequences per rank, B or B0:B1:... with every count >= 1")
        out.append(counts[0] if len(counts) == 1 else item)
    if not out:
        p.error("--batches: at least one size")
    return out


def parse_model(text, base):
    """'key=value,...' overrides of a model table -> a new table (ints). Raises ValueError
    naming an unknown key or a bad value."""
    model = dict(base)
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in model:
            raise ValueError(f"--model: {item!r} is not key=value with a key from {sorted(model)}")
        try:
            model[key] = int(value)
        except ValueError:
            raise ValueError(f"--model: {key} wants an integer, got {value!r}") from None
    bad = [k for k, v in model.items() if v < (0 if k == "first_k_dense_replace" else 1)]
    if bad:
        raise ValueError(f"--model: {bad} must be positive")
    experts_in_groups = model["topk_group"] * model["n_routed_experts"] // model["n_group"]
    if model["topk_group"] > model["n_group"] or model["num_experts_per_tok"] > experts_in_groups:
        raise ValueError("--model: need topk_group <= n_group and a top-k within the experts of topk_group groups")
    if model["first_k_dense_replace"] >= model["num_hidden_layers"]:
        raise ValueError("--model: need at least one MoE layer (first_k_dense_replace < num_hidden_layers)")
    if model["hidden_size"] % 8:
        raise ValueError("--model: hidden_size must be a multiple of 8 (moe_a2a's row size)")
    return model


def experts_for_world(experts, world, n_group):
    """The routed-expert count used at this world size: the smallest multiple of
    lcm(world, n_group) >= experts. Each rank needs the same number of experts (moe_a2a and
    transformers both split them evenly), and DeepSeek-V3's router splits them into n_group
    equal groups; 64 stays 64 at world 2, 4 and 8 with 8 groups."""
    step = math.lcm(world, n_group)
    n = -(-experts // step) * step
    if n // n_group < 2:  # the router scores a group by its top-2 experts
        n = -(-2 * n_group // step) * step
    return n


def config_kwargs(model, world, max_positions):
    """DeepseekV3Config keyword arguments for a model table at this world size."""
    experts = experts_for_world(model["n_routed_experts"], world, model["n_group"])
    return dict(
        model,
        n_routed_experts=experts,
        num_key_value_heads=model["num_attention_heads"],
        max_position_embeddings=max_positions,
    )


def weight_split(model):
    """(bytes of the routed experts' weights, bytes of all weights) of a transformers model."""
    experts = total = 0
    for name, p in model.named_parameters():
        n = p.numel() * p.element_size()
        total += n
        if ".mlp.experts." in name:
            experts += n
    return experts, total


def stat_fields(prefix, us):
    """{prefix}_median / _p10 / _p90 / _n of per-iteration times in us."""
    s = summarize(us)
    return {f"{prefix}_{k}": v for k, v in s.items()}


def per_second(count, us):
    return count / (us * 1e-6) if us and us > 0 and math.isfinite(us) else float("nan")


def speedups(rows):
    """Per batch, moe_a2a against the others: prefill throughput ratio and decode latency
    ratio (> 1 = moe_a2a faster), on the device times (medians)."""
    by = {(r["system"], r["batch_per_rank"]): r for r in rows if r.get("status") == "ok"}
    out = []
    for b in sorted({r["batch_per_rank"] for r in rows}, key=batch_key):
        a = by.get(("moe_a2a", b))
        if a is None:
            continue
        s = {"batch_per_rank": b}
        for other in ("hf_ep", "one_gpu"):
            o = by.get((other, b))
            if o is None:
                continue
            s[f"prefill_vs_{other}"] = a["prefill_tok_s"] / o["prefill_tok_s"]
            s[f"decode_vs_{other}"] = o["decode_us_median"] / a["decode_us_median"]
            if a.get("decode_graph_status") == o.get("decode_graph_status") == "ok":
                s[f"graph_decode_vs_{other}"] = o["decode_graph_us_median"] / a["decode_graph_us_median"]
        out.append(s)
    return out


HEADERS = [
    "B/rank",
    "system",
    "prefill ms",
    "p10-p90",
    "prefill tok/s",
    "wall ms",
    "decode ms",
    "p10-p90",
    "wall ms",
    "graph ms",
    "p10-p90",
    "wall ms",
    "decode seq/s",
    "check",
    "peak GiB",
]


def _ms(r, key):
    return fmt(r[f"{key}_median"] / 1e3, 2)


def _spread(r, key):
    return f"{r[f'{key}_p10'] / 1e3:.2f}-{r[f'{key}_p90'] / 1e3:.2f}"


def table_rows(rows):
    out = []
    for r in sorted(rows, key=lambda r: (batch_key(r["batch_per_rank"]), SYSTEMS.index(r["system"]))):
        head = [r["batch_per_rank"], LABELS[r["system"]]]
        tail = [r.get("check", "-"), fmt(r.get("peak_gib"), 1)]
        if r.get("status") != "ok":
            out.append(head + [r.get("status", "?")] + [""] * 10 + tail)
            continue
        if r.get("decode_graph_status") == "ok":
            graph = [_ms(r, "decode_graph_us"), _spread(r, "decode_graph_us"), _ms(r, "decode_graph_wall_us")]
        else:  # not asked for (--no-graph), or the step could not be captured (the status says why)
            graph = [r.get("decode_graph_status", "-"), "", ""]
        out.append(
            head
            + [_ms(r, "prefill_us"), _spread(r, "prefill_us"), fmt(r["prefill_tok_s"], 0)]
            + [_ms(r, "prefill_wall_us"), _ms(r, "decode_us"), _spread(r, "decode_us")]
            + [_ms(r, "decode_wall_us")]
            + graph
            + [fmt(r["decode_seq_s"], 0)]
            + tail
        )
    return out


SPEEDUP_HEADERS = [
    "B/rank",
    "prefill vs (b)",
    "prefill vs (c)",
    "decode vs (b)",
    "decode vs (c)",
    "graph decode vs (b)",
    "graph decode vs (c)",
]


def speedup_rows(sp):
    keys = (
        "prefill_vs_hf_ep",
        "prefill_vs_one_gpu",
        "decode_vs_hf_ep",
        "decode_vs_one_gpu",
        "graph_decode_vs_hf_ep",
        "graph_decode_vs_one_gpu",
    )
    return [[s["batch_per_rank"]] + [fmt(s.get(k), 2) for k in keys] for s in sp]


def parse_args(argv=None):
    p = scaffold.parser(__doc__)
    p.add_argument(
        "--batches",
        default="1,8,64",
        help="sequences per rank, comma list (default 1,8,64); B0:B1:... gives rank r the (r mod n)-th count",
    )
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma list from {list(SYSTEMS)} (default all)")
    p.add_argument("--smoke", action="store_true", help="tiny model, few iterations: does the script run end to end")
    p.add_argument(
        "--model",
        default="",
        help="key=value,... overrides of the model sizes, keys:\n" + ", ".join(f"{k}={v}" for k, v in MODEL.items()),
    )
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--prompt-len", type=int, default=None, help="prefill tokens per sequence (default 64; smoke 16)")
    p.add_argument("--prefill-iters", type=int, default=None, help="timed prefills (default 20; smoke 2)")
    p.add_argument("--decode-steps", type=int, default=None, help="timed decode steps (default 50; smoke 3)")
    p.add_argument("--wall-iters", type=int, default=None, help="wall-clock prefills and steps (default 10; smoke 2)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls before each series (default 3; smoke 1)")
    common.add_device_timing_args(
        p, None, "default 20000: an eager step of this model is a few hundred launches; smoke 1000"
    )
    scaffold.add_switch(p, "--check", "compare (a)'s and (b)'s last-token prefill logits with (c)'s (default on)")
    scaffold.add_switch(
        p,
        "--token-blocks",
        "(a): each eager forward in a tokens_per_forward() block of its tokens, so its AllToAll is sized\n"
        "for them rather than for the largest prefill (default on; the graph decode always is)",
    )
    scaffold.add_switch(
        p, "--graph", "also time the decode step captured in a CUDA graph on a StaticCache (default on)"
    )
    p.add_argument("--check-tol", type=float, default=5e-2, help="relative L2 error counted as pass (default 5e-2)")
    scaffold.add_seed(p)
    scaffold.add_out(p, "bench_hf_model.json / .csv")
    args = p.parse_args(argv)
    for k, v in MODE_DEFAULTS[args.smoke].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.batch_list = parse_batches(p, args.batches)
    try:
        args.model_table = parse_model(args.model, SMOKE_MODEL if args.smoke else MODEL)
    except ValueError as e:
        p.error(str(e))
    args.system_list = scaffold.names(p, "--systems", args.systems, SYSTEMS)
    scaffold.at_least(p, args, prompt_len=1, prefill_iters=1, decode_steps=1, wall_iters=1, warmup=0)
    args.most_per_rank = max(most_sequences(b) for b in args.batch_list)  # of any rank at any size
    if args.most_per_rank * args.prompt_len > MAX_TOKENS_PER_RANK:
        p.error(
            f"a prefill of {args.most_per_rank} x {args.prompt_len} tokens per rank is more than the "
            f"{MAX_TOKENS_PER_RANK} moe_a2a takes per forward: lower --prompt-len or the batches"
        )
    args.dtype_t = DTYPES[args.dtype]
    # positions used: the prompt, then every decode step of both timed series
    args.max_positions = args.prompt_len + 2 * args.warmup + args.decode_steps + args.wall_iters + 8
    return args


# ----------------------------------------------------------------------------- the systems
def build_full(ctx, config, args):
    """The whole model on this GPU, from a copy of the config (the backends below change
    settings on the config), with the same weights on every rank and for every system (seeded
    initialisation on the GPU; random weights, nothing is downloaded)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(args.seed)
    with torch.device(ctx.device):
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=args.dtype_t)
    # transformers' fastest experts of its own (and the one whose forward skips (b)'s masked
    # slots; the eager loop cannot); expert_parallel() replaces it for (a)
    model.set_experts_implementation("grouped_mm")
    return model.eval()


def build_moe_a2a(ctx, config, args):
    import moe_a2a.integrations.transformers as moe_tf

    model = build_full(ctx, config, args)
    moe_tf.expert_parallel(model, ctx.group, max_num_tokens=args.most_per_rank * args.prompt_len)
    return model, lambda: moe_tf.close(model)


def build_hf_ep(ctx, config, args):
    """transformers' own expert parallelism (see the module docstring). Raises if the experts
    did not end up sharded, so a silently replicated model is never timed as (b)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor
    from transformers.distributed import DistributedConfig

    model = build_full(ctx, config, args)
    mesh = DeviceMesh.from_group(ctx.group, ctx.device.type)  # the existing group: no new communicator
    dist_config = DistributedConfig(tp_size=ctx.world, enable_expert_parallel=True)
    model = type(model).maybe_distribute_model(model, dist_config, mesh)
    experts = config.n_routed_experts
    for name, p in model.named_parameters():
        if name.endswith("mlp.experts.down_proj"):
            local = p.to_local().shape[0] if isinstance(p, DTensor) else p.shape[0]
            if local * ctx.world != experts:
                raise RuntimeError(f"transformers kept {local} of {experts} experts in {name} on this rank")
    return model, None


def build_one_gpu(ctx, config, args):
    if ctx.rank != 0:
        return None, None  # rank 0 alone; the others take part only in the timing's alignment
    return build_full(ctx, config, args), None


BUILDERS = {"moe_a2a": build_moe_a2a, "hf_ep": build_hf_ep, "one_gpu": build_one_gpu}


# ----------------------------------------------------------------------------- measuring
def time_wall(ctx, fn, iters, warmup, prepare=None):
    """Host wall clock per call in us, from an idle GPU (ranks aligned, then synchronize) to
    the end of the call's work (synchronize): launch overhead included. Max over ranks per
    iteration, reduced after the loop."""
    local = []
    for i in range(warmup + iters):
        arg = prepare(i) if prepare is not None else i
        ctx.align()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(arg)
        torch.cuda.synchronize()
        if i >= warmup:
            local.append((time.perf_counter() - t0) * 1e6)
    return common.max_over_ranks(ctx, local)


class Inputs:
    """Every rank's prompts and decode tokens, the same on every rank (CPU generator): the whole
    batch is rank 0's sequences, then rank 1's, ... (rank_counts of each); rank r's are the first
    of its own draw, so a rank's sequences at B are the first B of its sequences at any larger B."""

    def __init__(self, ctx, args, vocab):
        g = torch.Generator().manual_seed(args.seed + 1)
        bmax, steps = args.most_per_rank, 2 * args.warmup + args.decode_steps + args.wall_iters
        self.world, self.rank = ctx.world, ctx.rank
        self.prompts = torch.randint(vocab, (ctx.world, bmax, args.prompt_len), generator=g).to(ctx.device)
        self.steps = torch.randint(vocab, (steps, ctx.world, bmax, 1), generator=g).to(ctx.device)

    def _select(self, per_rank, batch, own):  # per_rank: [world, bmax, ...]
        counts = rank_counts(batch, self.world)
        if own:
            return per_rank[self.rank, : counts[self.rank]]
        return torch.cat([per_rank[r, : counts[r]] for r in range(self.world)])

    def prompts_for(self, batch, own):
        return self._select(self.prompts, batch, own)

    def step_for(self, i, batch, own):
        return self._select(self.steps[i], batch, own)


def check_logits(ctx, system, logits, reference, batch, tol):
    """(c) publishes its last-token logits of all world x B sequences (rank 0 broadcasts);
    (a) compares its own rows, (b) all of them. 'pass (err)' / 'FAIL (err)' with the largest
    relative L2 error over ranks."""
    if system == "one_gpu":
        if ctx.rank != 0:
            logits = torch.empty(sum(rank_counts(batch, ctx.world)), reference["vocab"], device=ctx.device)
        dist.broadcast(logits, src=0, group=ctx.group)
        reference[batch] = logits
        return "reference"
    want = reference.get(batch)
    if want is None:
        return "-"
    if system == "moe_a2a":
        counts = rank_counts(batch, ctx.world)
        first = sum(counts[: ctx.rank])
        want = want[first : first + counts[ctx.rank]]
    err = ((logits - want).norm() / want.norm().clamp_min(1e-30)).item()
    err = common.max_over_ranks(ctx, [err])[0]
    return f"{'pass' if err < tol else 'FAIL'} ({err:.1e})"


def measure(ctx, args, system, model, batch, inputs, reference, flusher):
    """One row: check, prefill (events, then wall), decode (events, then wall) at one batch."""
    own = system == "moe_a2a"  # (a) runs this rank's sequences; (b) and (c) all of them
    active = model is not None  # (c): rank 0 only
    prompts = inputs.prompts_for(batch, own)
    counts = rank_counts(batch, ctx.world)
    most = max(counts)  # sequences of the rank that holds the most

    def tokens_per_forward(n):
        """(a) runs each forward in a tokens_per_forward() block of the most tokens any rank
        feeds it (n: the same on every rank, as the block asks): its AllToAll is sized for them,
        not for the largest prefill."""
        if system == "moe_a2a" and args.token_blocks:
            import moe_a2a.integrations.transformers as moe_tf

            return moe_tf.tokens_per_forward(model, n)
        return contextlib.nullcontext()

    def prefill(_):
        if not active:
            return None
        with tokens_per_forward(most * args.prompt_len):
            return model(input_ids=prompts, use_cache=True, logits_to_keep=1)

    row = {
        "system": system,
        "label": LABELS[system],
        "batch_per_rank": batch,
        "seqs_total": sum(counts),
        "seqs_per_model": prompts.shape[0],
        "prompt_len": args.prompt_len,
        "prefill_tokens_total": sum(counts) * args.prompt_len,
    }
    out = prefill(0)
    logits = out.logits[:, -1].float().contiguous() if active else None
    row["check"] = check_logits(ctx, system, logits, reference, batch, args.check_tol) if args.check else "-"
    del out, logits

    us = common.time_device(ctx, prefill, args.prefill_iters, args.warmup, flusher=flusher)
    row.update(stat_fields("prefill_us", us))
    row.update(stat_fields("prefill_wall_us", time_wall(ctx, prefill, args.wall_iters, args.warmup)))
    row["prefill_tok_s"] = per_second(row["prefill_tokens_total"], row["prefill_us_median"])

    # decode: each series consumes its own run of tokens, the cache growing by one per step
    count = iter(range(2 * args.warmup + args.decode_steps + args.wall_iters))
    next_tokens = lambda *_: inputs.step_for(next(count), batch, own)  # noqa: E731
    with tokens_per_forward(most * args.prompt_len):
        cache = static_cache_after_prefill(model, prompts, 2 * args.warmup + args.decode_steps + args.wall_iters)

    def decode(tokens):
        if not active:
            return None
        with tokens_per_forward(most):
            return model(input_ids=tokens, past_key_values=cache, use_cache=True, logits_to_keep=1)

    us = common.time_device(ctx, decode, args.decode_steps, args.warmup, prepare=next_tokens, flusher=flusher)
    row.update(stat_fields("decode_us", us))
    wall = time_wall(ctx, decode, args.wall_iters, args.warmup, prepare=next_tokens)
    row.update(stat_fields("decode_wall_us", wall))
    row["decode_seq_s"] = per_second(row["seqs_total"], row["decode_us_median"])
    del cache
    if args.graph:
        with tokens_per_forward(most * args.prompt_len):
            cache = static_cache_after_prefill(model, prompts, graph_positions(args))
        tokens = lambda i: inputs.step_for(i % inputs.steps.shape[0], batch, own)  # noqa: E731
        row.update(measure_graph_decode(ctx, args, model if active else None, cache, tokens, flusher))
    row["status"] = "ok"
    return row


def static_cache_after_prefill(model, prompts, positions):
    """A transformers StaticCache with the prompts in it (one eager prefill) and room for
    `positions` more tokens; None on a rank without the model. Decode runs on a StaticCache
    here, eager too: on transformers' default DynamicCache each step's new key length cost
    about 9 ms of host time in every attention call's scaled_dot_product_attention (cProfile,
    2 x H200, 2026-11-25), for every system alike, 45 ms a step of this model against 8.4 on a
    StaticCache: it hid everything else."""
    if model is None:
        return None
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=prompts.shape[1] + positions)
    model(input_ids=prompts, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache


def graph_positions(args):
    """Cache positions a graph decode series uses after the prompt: DecodeGraph's eager steps
    and its capture, then the timed series (events, then wall)."""
    from moe_a2a.integrations.decode_graph import DEFAULT_WARMUP_STEPS

    return DEFAULT_WARMUP_STEPS + 1 + 2 * args.warmup + args.decode_steps + args.wall_iters


def measure_graph_decode(ctx, args, model, cache, tokens, flusher):
    """decode_graph_us / decode_graph_wall_us: the decode step captured in a CUDA graph
    (moe_a2a.integrations.decode_graph.DecodeGraph) on a StaticCache that an eager prefill of
    the same prompts filled. A failure on any rank (a model whose step cannot be captured)
    becomes decode_graph_status on every rank, agreed before anything is timed, so no rank
    waits for another in the timing's alignment."""
    from moe_a2a.integrations.decode_graph import DecodeGraph
    from moe_a2a.integrations.shared_overlap import overlap_states

    count = iter(range(graph_positions(args)))
    next_tokens = lambda *_: tokens(next(count))  # noqa: E731
    step, error, beside = None, None, 0
    if model is not None:
        try:
            step = DecodeGraph(model, cache)
            taken = [state.taken for state in overlap_states(model)]
            while not step.captured:  # its eager steps, then the step that captures
                step(next_tokens())
            beside = sum(now > before for now, before in zip([s.taken for s in overlap_states(model)], taken))
        except Exception as e:  # reported in the row; the run goes on
            error = common.error_status(e, "graph decode")
    if common.max_over_ranks(ctx, [float(error is not None)])[0] > 0:
        return {"decode_graph_status": error or "error on another rank"}

    def decode(tokens):
        return step(tokens) if step is not None else None

    us = common.time_device(ctx, decode, args.decode_steps, args.warmup, prepare=next_tokens, flusher=flusher)
    wall = time_wall(ctx, decode, args.wall_iters, args.warmup, prepare=next_tokens)
    row = dict(stat_fields("decode_graph_us", us), **stat_fields("decode_graph_wall_us", wall))
    return dict(row, decode_graph_status="ok", decode_graph_shared_beside=beside)


def run_system(ctx, args, system, config, inputs, reference, flusher):
    """Builds one system, measures every batch, frees it. An error ends this system (its
    remaining batches are reported as errors) and the run goes on; a hang is not caught."""
    rows, model, close = [], None, None
    try:
        model, close = BUILDERS[system](ctx, config, args)
        # (a) and (b) build the whole model before sharding it: the peak counts from here
        torch.cuda.reset_peak_memory_stats(ctx.device)
        for batch in args.batch_list:
            if ctx.rank == 0:
                print(f"  {LABELS[system]}: B={batch}/rank", flush=True)
            rows.append(measure(ctx, args, system, model, batch, inputs, reference, flusher))
    except Exception as e:
        done = {r["batch_per_rank"] for r in rows}
        status = common.error_status(e, LABELS[system])
        rows += [
            {"system": system, "label": LABELS[system], "batch_per_rank": b, "status": status}
            for b in args.batch_list
            if b not in done
        ]
    finally:
        if close is not None:
            close()
        del model
        gc.collect()
        torch.cuda.empty_cache()
    peak = common.max_over_ranks(ctx, [torch.cuda.max_memory_allocated(ctx.device) / 2**30])[0]
    for r in rows:
        r["peak_gib"] = peak
    return rows


NOTES = [
    "(a) moe_a2a DP+EP: moe_a2a.integrations.transformers.expert_parallel; each rank runs its own B "
    "sequences, experts sharded, dispatch/combine; each forward in a tokens_per_forward() block of its "
    "tokens (B x prompt, or B), unless --no-token-blocks (then every forward on the AllToAll of the largest prefill)",
    "(b) transformers EP: DistributedConfig(tp_size=world, enable_expert_parallel=True) applied with "
    "PreTrainedModel.maybe_distribute_model over the process group (base_model_ep_plan); each rank runs "
    "all world x B sequences, masked non-local slots, all-reduce of each MoE layer's output",
    "(c) one GPU: rank 0 runs all world x B sequences with every expert (transformers' grouped_mm experts)",
    "times: CUDA events per call (host queued ahead by the preroll), max over ranks, median (p10-p90); "
    "wall = host clock from an idle GPU to the end of the call, launch overhead included; prefill and "
    "decode eager, graph = the decode step replayed from a CUDA graph (DecodeGraph); decode on a StaticCache",
    "prefill tok/s and decode seq/s count the whole batch of world x B sequences, for every system",
    "decode_graph_shared_beside (JSON, CSV): the MoE layers whose shared expert the captured step runs on a second "
    "stream beside the exchange (moe_a2a.integrations.shared_overlap; (a) only)",
]


def main(argv=None):
    args = parse_args(argv)
    mod, why = common.import_moe_a2a()  # before NCCL starts: moe_a2a pins multicast off too
    if "moe_a2a" in args.system_list and not common.has_extension(mod):
        raise SystemExit(f"moe_a2a with its compiled extension is needed for (a): {why or 'extension not built'}")
    import transformers
    from transformers import DeepseekV3Config

    transformers.logging.set_verbosity_error()
    one_gpu = common.one_gpu_mode()
    ctx = common.init_distributed(one_gpu=one_gpu)
    config = DeepseekV3Config(**config_kwargs(args.model_table, ctx.world, args.max_positions))
    if ctx.rank == 0:
        if one_gpu:
            print(f"{common.ONE_GPU_ENV}=1: {ctx.world} ranks share GPU 0 over gloo; the times mean nothing")
        with torch.device("meta"):
            e, t = weight_split(
                transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=args.dtype_t)
            )
        print(
            f"== DeepSeek-V3-shaped model{' (smoke)' if args.smoke else ''}: hidden {config.hidden_size}, "
            f"{config.n_routed_experts} experts top-{config.num_experts_per_tok}, expert FFN "
            f"{config.moe_intermediate_size}, {config.num_hidden_layers} layers, {args.dtype}; experts "
            f"{e / 2**20:.0f} of {t / 2**20:.0f} MiB of weights ({100 * e / t:.0f}%); world {ctx.world}, prompt "
            f"{args.prompt_len} tokens, batches {args.batch_list} per rank",
            flush=True,
        )
    flusher = common.L2Flusher(ctx.device, args.flush_mib * common.MiB, args.preroll_us)
    inputs = Inputs(ctx, args, config.vocab_size)
    reference = {"vocab": config.vocab_size}
    with torch.no_grad():
        systems = [s for s in RUN_ORDER if s in args.system_list]
        rows = scaffold.run_cases(
            ctx, systems, lambda system: run_system(ctx, args, system, config, inputs, reference, flusher)
        )
    if ctx.rank == 0:
        print("\n" + "\n".join(NOTES))
        common.print_table(HEADERS, table_rows(rows))
        sp = speedups(rows)
        if sp:
            print("\nmoe_a2a against (b) and (c): prefill tok/s ratio, decode step time ratio (> 1: moe_a2a faster)")
            common.print_table(SPEEDUP_HEADERS, speedup_rows(sp))
        report = {
            "meta": dict(common.metadata(ctx), one_gpu_mode=one_gpu, transformers=transformers.__version__),
            "settings": scaffold.settings(args),
            "model_config": config_kwargs(args.model_table, ctx.world, args.max_positions),
            "notes": NOTES,
            "rows": rows,
            "speedups": sp,
        }
        scaffold.write_results(args.out, "bench_hf_model_smoke" if args.smoke else "bench_hf_model", report)
    scaffold.finish()


if __name__ == "__main__":
    main()
