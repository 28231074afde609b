"""Shared benchmark plumbing: distributed init, timing, statistics, inputs, metadata, output.

Import this module before anything that may initialise NCCL, NVSHMEM or torch symmetric
memory: it imports moe_a2a first, which pins NVLink multicast off for this process and its
children (moe_a2a.NO_MULTICAST_ENV, the one definition) before torch loads, and before that sets
ROCm's launch setting (ROCM_LAUNCH_ENV).
"""

import os
import sys

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)

# ROCm: kernel arguments in device memory, which shortens each launch (what MI300X serving engines run with; at a few
# tokens every launch is on the critical path). The HIP runtime reads it when torch first starts it, so it is set
# before anything loads torch (moe_a2a does); a value the launcher set is kept, and the metadata records it. No effect
# on CUDA. The library leaves it to its users (docs/usage.md): it changes every launch of their process.
ROCM_LAUNCH_ENV = {"HIP_FORCE_DEV_KERNARG": "1"}
for _var, _val in ROCM_LAUNCH_ENV.items():
    os.environ.setdefault(_var, _val)

# First, before torch: importing moe_a2a sets NO_MULTICAST_ENV (setdefault: a value the launcher
# already set is kept, and _check_multicast_env() warns if it turns multicast back on). The
# installed package if there is one, else the in-tree python/ folder. Only its pure-Python parts
# load here; the compiled extension loads on first use (has_extension).
try:
    import moe_a2a
except ImportError:
    sys.path.append(os.path.join(REPO_ROOT, "python"))
    import moe_a2a

NO_MULTICAST_ENV = moe_a2a.NO_MULTICAST_ENV

import csv  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if BENCH_DIR not in sys.path:  # sibling modules import by plain name, however this was loaded
    sys.path.insert(0, BENCH_DIR)
MiB = 1 << 20


def _check_multicast_env():
    for k, v in NO_MULTICAST_ENV.items():
        if os.environ.get(k) != v:
            print(f"WARNING: {k}={os.environ.get(k)!r}; multicast must stay off ({k}={v})", file=sys.stderr)


_check_multicast_env()


# ----------------------------------------------------------------------------- moe_a2a
def import_moe_a2a():
    """(module, ""): the moe_a2a this module imported first (installed, else the in-tree
    python/ folder). The (module or None, reason) shape is kept for the callers.

    The pure-python modules (reference, sol) import while the compiled extension is missing,
    so callers test for what they need (has_extension, moe_submodule).
    """
    return moe_a2a, ""


def has_extension(mod):
    """True when the compiled extension loads (AllToAll itself is pure python and imports
    without it, then fails on first use)."""
    if mod is None or not hasattr(mod, "AllToAll"):
        return False
    try:
        from moe_a2a._ext import ext

        ext()
        return True
    except Exception:
        return False


def moe_submodule(name):
    """moe_a2a.<name> (sol, microbench, trace, ...) or None."""
    import importlib

    mod, _ = import_moe_a2a()
    if mod is None:
        return None
    try:
        return importlib.import_module(f"moe_a2a.{name}")
    except Exception:
        return None


def _pure_submodule(name):
    """moe_a2a.<name> for a pure-python module (importable from python/ without the extension)."""
    mod = moe_submodule(name)
    if mod is None:
        _, why = import_moe_a2a()
        raise ImportError(f"moe_a2a.{name} did not import ({why or 'see the traceback of import moe_a2a'})")
    return mod


def reference():
    """moe_a2a.reference, the pure-torch reference of dispatch and combine."""
    return _pure_submodule("reference")


def sol_model():
    """moe_a2a.sol, the one speed-of-light model."""
    return _pure_submodule("sol")


# ----------------------------------------------------------------------------- distributed
@dataclass
class Ctx:
    rank: int
    world: int
    local_rank: int
    device: torch.device
    group: object
    one_gpu: bool = False  # every rank on GPU 0 (MOE_A2A_TEST_ONE_GPU=1): times are a proxy at best

    def align(self):
        """Tiny all_reduce enqueued on the stream: every GPU enters the next timed region at
        about the same moment, without a host sync, so one rank's time is not its wait for a
        late peer."""
        dist.all_reduce(self._one, op=dist.ReduceOp.MAX, group=self.group)

    def barrier(self):
        dist.barrier(group=self.group)


ONE_GPU_ENV = "MOE_A2A_TEST_ONE_GPU"  # "1": every rank on GPU 0 (tests/python/gpu/conftest.py)


def one_gpu_mode():
    """True under MOE_A2A_TEST_ONE_GPU=1, the correctness smoke mode of the GPU tests."""
    return os.environ.get(ONE_GPU_ENV) == "1"


def init_distributed(one_gpu=False):
    """Process group from torchrun's env:// variables; one GPU per process (LOCAL_RANK).

    one_gpu=True puts every rank on GPU 0 over a gloo group, as the GPU tests do under
    MOE_A2A_TEST_ONE_GPU=1 (NCCL refuses two ranks on one GPU). The ranks' kernels then share
    the GPU by time slices, so such a run checks that a script works, and its times mean nothing."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise SystemExit("launch with torchrun --nproc-per-node=<N> (RANK/WORLD_SIZE unset)")
    local_rank = 0 if one_gpu else int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    if one_gpu:
        dist.init_process_group("gloo", init_method="env://")
    else:
        # device_id binds the NCCL communicator to this GPU up front (eager init).
        dist.init_process_group("nccl", init_method="env://", device_id=device)
    ctx = Ctx(dist.get_rank(), dist.get_world_size(), local_rank, device, dist.group.WORLD, one_gpu)
    ctx._one = torch.ones(1, device=device)
    if not 2 <= ctx.world <= 8 and ctx.rank == 0:
        print(f"WARNING: world size {ctx.world} is outside the 2..8 this suite targets", file=sys.stderr)
    return ctx


def init_benchmark():
    """init_distributed for a timing benchmark: one GPU per rank, or under MOE_A2A_TEST_ONE_GPU=1
    every rank on GPU 0, said loudly, since only under MPS (tools/mps_proxy.sh) do the ranks'
    kernels run at once, and even then the times are a one-GPU proxy (the peer's memory is this
    GPU's own), good for before/after comparisons of kernel changes, not for the machine's numbers."""
    ctx = init_distributed(one_gpu=one_gpu_mode())
    if ctx.one_gpu and ctx.rank == 0:
        print(
            f"{ONE_GPU_ENV}=1: every rank on GPU 0; the times are a one-GPU proxy at best (tools/mps_proxy.sh)",
            flush=True,
        )
    return ctx


def add_num_sms_arg(p):
    p.add_argument(
        "--num-sms",
        type=int,
        default=None,
        help="blocks per moe_a2a kernel (AllToAll(num_sms=); default every SM); also caps the floor's blocks",
    )
    p.add_argument(
        "--send-sms",
        default=None,
        help="blocks of the fused dispatch / combine that only send: 'auto', 'n' or 'dispatch,combine' "
        "(AllToAll(send_sms=); default MOE_A2A_SEND_SMS, else auto; 0: every block sends and receives)",
    )


def gather_rows(ctx, t):
    """all_gather of a tensor whose dim 0 differs per rank (0 included): pad to the max, gather,
    trim. Returns one tensor per rank, rank r's rows (on this device)."""
    n = torch.tensor([t.shape[0]], device=ctx.device)
    ns = [torch.zeros_like(n) for _ in range(ctx.world)]
    dist.all_gather(ns, n, group=ctx.group)
    ns = [int(v.item()) for v in ns]
    if max(ns) == 0:  # every rank empty: nothing to gather (and no zero-size collective)
        return [t.new_zeros((0,) + tuple(t.shape[1:])) for _ in ns]
    pad = t.new_zeros((max(ns),) + tuple(t.shape[1:]))
    pad[: t.shape[0]].copy_(t)
    outs = [torch.empty_like(pad) for _ in range(ctx.world)]
    dist.all_gather(outs, pad.contiguous(), group=ctx.group)
    return [o[:m] for o, m in zip(outs, ns)]


def max_over_ranks(ctx, values):
    t = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.group)
    return t.tolist()


# ----------------------------------------------------------------------------- timing
def add_device_timing_args(p, preroll_default, preroll_help):
    """--flush-mib and --preroll-us, the two knobs of L2Flusher, for every benchmark that times
    device work with events (what a benchmark adds: its default preroll and why)."""
    p.add_argument(
        "--flush-mib", type=int, default=256, help="L2 flush buffer written before every timed iteration (default 256)"
    )
    p.add_argument(
        "--preroll-us",
        type=float,
        default=preroll_default,
        help="GPU busy-wait before each start event, so the host queues the timed calls ahead: device\n"
        f"time excludes host launch overhead; 0 = off ({preroll_help})",
    )


class L2Flusher:
    """Run just before every start event.

    1. Writes a buffer larger than any L2 (H200: 60 MB, MI300X: 256 MB Infinity Cache) so
       every timed iteration starts cold, as a real layer would after the attention block.
    2. Then keeps the GPU busy for preroll_us (torch.cuda._sleep), so the host can queue the
       timed calls ahead of the GPU: device time then measures the kernels, not the host's
       launch overhead (~8 us per launch in the H200 VMs), except where a system itself
       waits for the host (the NCCL path's split sizes). The harness mode keeps the host in."""

    def __init__(self, device, nbytes=256 * MiB, preroll_us=0.0):
        self.buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device)
        self.cycles = 0
        if preroll_us > 0 and hasattr(torch.cuda, "_sleep"):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1000)  # first call loads the kernel
            s.record()
            torch.cuda._sleep(1_000_000)
            e.record()
            e.synchronize()
            self.cycles = int(preroll_us * 1_000_000 / (s.elapsed_time(e) * 1e3))

    def flush(self):
        self.buf.zero_()
        if self.cycles:
            torch.cuda._sleep(self.cycles)


def before_timed_region(ctx, flusher=None):
    """What every eager timed region starts after: L2 flushed and the preroll (flusher), then the
    ranks lined up (Ctx.align). The alignment comes last: the preroll's sleep counts clock cycles,
    and two GPUs at different clocks (one warmer after a layer's GEMMs) end a 1 ms sleep tens of
    us apart, which the earlier rank would spend inside the timed region waiting for its peer."""
    if flusher is not None:
        flusher.flush()
    ctx.align()


def time_device(ctx, fn, iters, warmup, prepare=None, flusher=None, after=None):
    """Per-iteration device time in us of fn(prepare(i)), measured with events on every rank,
    then the max over ranks per iteration (reduced after the loop, outside the timed region).

    prepare(i) runs untimed before each iteration (pick a pool entry, or dispatch before a
    combine is timed); after(result) runs untimed after it (combine what a timed dispatch
    sent: moe_a2a wants every dispatch combined before the next one)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(warmup + iters):
        arg = prepare(i) if prepare is not None else i
        before_timed_region(ctx, flusher)
        j = i - warmup
        if j >= 0:
            starts[j].record()
        res = fn(arg)
        if j >= 0:
            ends[j].record()
        if after is not None:
            after(res)
    torch.cuda.synchronize()
    local = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    return max_over_ranks(ctx, local)


def capture_steps(step, n_inputs, iters):
    """A CUDA graph of step(0), ..., step(iters - 1) (inputs cycled over n_inputs), after one
    warm-up pass over the inputs on a side stream, as torch requires before capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(n_inputs):
            step(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(iters):
            step(i % n_inputs)
    torch.cuda.synchronize()
    return graph


def time_graph(ctx, step, n_inputs, iters_per_graph, replays, warmup_replays=2):
    """CUDA-graph steady state: per-iteration device time in us of `step`, one value per replay,
    each the max over ranks (reduced after the loop, outside the timed region).

    step(i) runs one iteration on pre-generated input i (0 <= i < n_inputs, n_inputs >= 8
    different routings and tokens, allocated before capture: a graph reads static tensors).
    Warm-up: step(0..n_inputs-1) once on a side stream (as torch requires before capture; it
    also compiles and allocates whatever the step needs). Then iters_per_graph calls
    step(i % n_inputs) are captured in one torch.cuda.CUDAGraph (every rank captures the same
    sequence), and the graph is replayed warmup_replays + replays times, each replay after
    Ctx.align() and between two events; per-iteration time = replay time / iters_per_graph.
    A step must leave nothing pending between iterations (moe_a2a: combine every dispatch)."""
    if n_inputs < 8:
        raise ValueError(f"time_graph needs >= 8 different inputs, got {n_inputs}")
    if iters_per_graph < 1 or replays < 1:
        raise ValueError("iters_per_graph and replays must be >= 1")
    graph = capture_steps(step, n_inputs, iters_per_graph)
    local = moe_submodule("microbench").replay_times_us(graph, iters_per_graph, replays, warmup_replays, ctx.align)
    del graph
    return max_over_ranks(ctx, local)


def time_harness(ctx, fn, get_inputs, iters, warmup):
    """The challenge harness: host wall clock on rank 0 between two barriers, inputs cloned
    inside the timed region. Returns rank 0's per-iteration times in us (broadcast).
    A synchronize before the closing barrier makes sure the work itself is inside."""
    times = []
    for i in range(warmup + iters):
        inputs = get_inputs(i)
        ctx.barrier()
        t0 = time.perf_counter()
        cloned = tuple(t.clone() for t in inputs)
        fn(cloned)
        torch.cuda.synchronize()
        ctx.barrier()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append((t1 - t0) * 1e6)
    t = torch.tensor(times, dtype=torch.float64, device=ctx.device)
    dist.broadcast(t, src=0, group=ctx.group)
    return t.tolist()


# ----------------------------------------------------------------------------- statistics
def quantile(values, q):
    """Linear interpolation between order statistics (numpy's default method)."""
    if not values:
        return float("nan")
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(values):
    return {
        "median": quantile(values, 0.5),
        "p10": quantile(values, 0.1),
        "p90": quantile(values, 0.9),
        "n": len(values),
    }


def geomean(values):
    v = [x for x in values if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


# ----------------------------------------------------------------------------- shapes, inputs
DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
}
# fp8 dispatch formats by name (AllToAll(dispatch_dtype=)): the --fp8 options of the benchmarks.
FP8_DTYPES = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}

CHALLENGE_SHAPES = "8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"


@dataclass(frozen=True)
class Shape:
    experts: int
    topk: int
    hidden: int
    max_tokens: int
    dtype: torch.dtype = torch.bfloat16
    seed: int = 0

    @property
    def label(self):
        return f"E{self.experts}-K{self.topk}-H{self.hidden}-T{self.max_tokens}"


def parse_shapes(text, default_dtype="bf16", default_seed=0):
    """'E,K,H,T[,dtype[,seed]];...' -> [Shape]. Empty items (a trailing ';') are skipped."""
    shapes = []
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        f = [p.strip() for p in item.split(",")]
        if not 4 <= len(f) <= 6:
            raise ValueError(f"shape {item!r}: want E,K,H,T[,dtype[,seed]]")
        e, k, h, t = (int(v) for v in f[:4])
        dname = f[4] if len(f) > 4 else default_dtype
        if dname not in DTYPES:
            raise ValueError(f"shape {item!r}: dtype {dname!r} not in {sorted(DTYPES)}")
        seed = int(f[5]) if len(f) > 5 else default_seed
        if min(e, k, h, t) <= 0 or k > e:
            raise ValueError(f"shape {item!r}: need positive sizes and topk <= experts")
        shapes.append(Shape(e, k, h, t, DTYPES[dname], seed))
    return shapes


def pool_seed(shape, j):
    """Seed of pool entry j. Entry -1 is the correctness-check input. A wide stride keeps
    seeds apart even if the generator adds the rank to the seed."""
    return shape.seed + 1_000_003 * (j + 1)


def make_inputs(shape, rank, world, seed, device, num_tokens=None):
    """Rank `rank`'s (x, topk_idx, topk_weights), a function of the seed only: the reference
    draws on the CPU and then moves, so every rank can regenerate every rank's data. The
    result keeps the reference's type (a NamedTuple that moe_reference expects)."""
    return reference().generate_rank_inputs(
        rank,
        world,
        shape.experts,
        shape.topk,
        shape.hidden,
        shape.max_tokens,
        shape.dtype,
        seed,
        device=device,
        num_tokens=num_tokens,
    )


def rank_count(num_tokens, rank, world):
    """This rank's num_tokens from InputPool's argument: None or an int as given, a sequence
    (one entry per rank) its entry `rank`."""
    if num_tokens is None or isinstance(num_tokens, int):
        return num_tokens
    if len(num_tokens) != world:
        raise ValueError(f"num_tokens has {len(num_tokens)} entries for world {world}")
    return num_tokens[rank]


# Per-rank token counts (bench_graph.py --counts): a spec is "max" (every rank the shape's max
# tokens), "drawn" (each rank and pool entry its own count, uniform in 1..max as the challenge
# draws it) or "a/b[/c...]" (rank r gets entry r % n); the preset "issue35" expands per shape.
COUNT_PRESETS = ("issue35",)


def issue35_counts(max_tokens):
    """The per-rank count specs issue 35 asks for, at a shape of `max_tokens` tokens per rank:
    unequal pairs and the equal pair at the larger count, only where every entry <= max_tokens,
    then "drawn" and "1/1"."""
    specs = []
    if max_tokens >= 16:
        specs += ["1/16", "16/1", "4/16", "0/16", "16/16"]
    if max_tokens >= 128:
        specs += ["1/128", "128/1", "128/128"]
    if max_tokens >= 4096:
        specs += ["64/4096", "4096/4096"]
    return specs + ["drawn", "1/1"]


def count_entries(spec):
    """The per-rank counts of an "a/b[/c...]" spec as ints, or None for "max" and "drawn".
    Raises ValueError for anything else (a preset name included: expand it first)."""
    spec = spec.strip()
    if spec in ("max", "drawn"):
        return None
    parts = [p.strip() for p in spec.split("/")]
    if not all(p.isdigit() for p in parts):  # isdigit: no sign, no empty part
        raise ValueError(
            f"--counts {spec!r}: want max, drawn, {' or '.join(COUNT_PRESETS)}, or per-rank counts a/b[/c...] "
            "(integers >= 0)"
        )
    return [int(p) for p in parts]


def count_specs(text, max_tokens, what, presets=True):
    """--counts text (';'-separated specs) -> the normalized specs, presets expanded (where
    `presets`; elsewhere a preset name is refused like any bad spec), duplicates dropped. Raises
    ValueError naming the spec and `what` when a count is outside [0, max_tokens]."""
    specs = []
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        if item in COUNT_PRESETS and not presets:
            raise ValueError(f"--counts {item!r}: want max, drawn, or per-rank counts a/b[/c...] (no preset here)")
        specs += issue35_counts(max_tokens) if item == "issue35" else [item]
    out = []
    for spec in specs:
        entries = count_entries(spec)
        if entries is None:
            out.append(spec)
            continue
        bad = [n for n in entries if n > max_tokens]
        if bad:
            raise ValueError(f"--counts {spec!r}: count {bad[0]} outside [0, {max_tokens}] of {what}")
        out.append("/".join(str(n) for n in entries))
    if not out:
        raise ValueError(f"--counts {text!r}: no count spec")
    return list(dict.fromkeys(out))


def counts_for_shape(text, shape):
    """count_specs at `shape`: every count at most its max tokens."""
    return count_specs(text, shape.max_tokens, f"shape {shape.label} (max tokens {shape.max_tokens})")


def spec_num_tokens(spec, world, max_tokens):
    """InputPool's num_tokens for a normalized spec: one count per rank, or None ("drawn")."""
    if spec == "drawn":
        return None
    if spec == "max":
        return [max_tokens] * world
    entries = count_entries(spec)
    return [entries[r % len(entries)] for r in range(world)]


def as_inputs(x, idx, w):
    """(x, idx, w) in the reference's input type, when it has one."""
    cls = getattr(reference(), "Routing", None)
    return cls(x, idx, w) if cls is not None else (x, idx, w)


class InputPool:
    """Pre-generated inputs cycled through, so each iteration sees fresh tokens and routing
    while generation stays out of the timed region. Also keeps every rank's routing of every
    entry (for the byte counts and the speed of light).

    num_tokens: this rank's token count T: None = drawn uniformly in [1, max_tokens] per entry
    and rank (moe_a2a.reference.generate_rank_inputs, seeded by the entry's seed and the rank),
    an int = every rank the same (0 allowed), or a sequence with one count (or None) per rank.
    counts[j][r]: rank r's token count in entry j (gathered, the same on every rank)."""

    def __init__(self, ctx, shape, size, num_tokens=None):
        mine = rank_count(num_tokens, ctx.rank, ctx.world)
        self.items = [
            make_inputs(shape, ctx.rank, ctx.world, pool_seed(shape, j), ctx.device, mine) for j in range(size)
        ]
        # all_idx[j][r]: rank r's topk_idx of entry j (on this device)
        self.all_idx = [gather_rows(ctx, it[1]) for it in self.items]
        self.counts = [[int(t.shape[0]) for t in entry] for entry in self.all_idx]

    def __len__(self):
        return len(self.items)

    def get(self, i):
        return self.items[i % len(self.items)]

    def routing(self, i):
        return self.all_idx[i % len(self.items)]


# ----------------------------------------------------------------------------- metadata
def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=REPO_ROOT).stdout.strip()
    except Exception:
        return ""


SMI_FIELDS = ("index", "pci.bus_id", "name", "driver_version", "clocks.sm", "clocks.max.sm")


def nvidia_smi_gpus():
    """One dict per GPU nvidia-smi lists (SMI_FIELDS; clocks in MHz), or [] without nvidia-smi."""
    out = _run(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"])
    gpus = []
    for line in out.splitlines():
        vals = [v.strip() for v in line.split(",")]
        if len(vals) != len(SMI_FIELDS):
            continue
        g = dict(zip(SMI_FIELDS, vals))
        for k in ("clocks.sm", "clocks.max.sm"):
            try:
                g[k] = int(g[k])
            except ValueError:  # "[N/A]" on some boards
                g[k] = None
        gpus.append(g)
    return gpus


def _this_gpu(gpus, device):
    """The nvidia-smi row of `device`: matched by PCI bus id when torch reports it, else by the
    visible index (CUDA_VISIBLE_DEVICES can renumber, hence the bus id first)."""
    try:
        p = torch.cuda.get_device_properties(device)
        bus = f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0"
        for g in gpus:
            if g["pci.bus_id"].upper().endswith(bus[-12:]):
                return g
    except Exception:
        pass
    idx = device.index if isinstance(device, torch.device) and device.index is not None else 0
    if "CUDA_VISIBLE_DEVICES" not in os.environ and idx < len(gpus):
        return gpus[idx]
    return None


def _cuda_driver_version():
    """The CUDA version the driver supports ("CUDA Version: 13.0" in nvidia-smi's header)."""
    import re

    m = re.search(r"CUDA Version:\s*([0-9.]+)", _run(["nvidia-smi"]))
    return m.group(1) if m else None


def _git():
    commit = _run(["git", "rev-parse", "HEAD"]) or "unknown"
    changed = _run(["git", "diff", "--name-only", "HEAD"]).splitlines()  # tracked, staged or not
    return {"git_commit": commit, "git_dirty": bool(changed), "git_dirty_files": changed[:50]}


def metadata(ctx=None):
    """Where and how a result was taken: date, host, git commit (+ dirty flag and the modified
    tracked files, untracked ones left out), python / torch / CUDA or ROCm versions, driver,
    GPU model, SM clocks (current and max, MHz, from nvidia-smi when it reports them), the exact
    command line, world size and the multicast environment."""
    gpus = nvidia_smi_gpus()
    device = ctx.device if ctx else (torch.device("cuda", 0) if torch.cuda.is_available() else None)
    mine = _this_gpu(gpus, device) if (gpus and device is not None) else None
    driver = gpus[0]["driver_version"] if gpus else "unknown"
    if torch.version.hip and driver == "unknown":
        try:
            with open("/sys/module/amdgpu/version") as f:
                driver = "amdgpu " + f.read().strip()
        except OSError:
            pass
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
        "argv": list(sys.argv),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cuda_driver_version": _cuda_driver_version(),
        "driver": driver,
        **_git(),
        "world_size": ctx.world if ctx else None,
        # the multicast switches, ROCm's launch setting, and every moe_a2a setting taken from the environment
        "env": {
            k: os.environ.get(k)
            for k in sorted({*NO_MULTICAST_ENV, *ROCM_LAUNCH_ENV, *(k for k in os.environ if k.startswith("MOE_A2A_"))})
        },
        "sm_clock_mhz": mine["clocks.sm"] if mine else None,
        "sm_clock_max_mhz": mine["clocks.max.sm"] if mine else None,
        "gpus_smi": gpus,
    }
    if torch.cuda.is_available():
        meta["gpu_name"] = torch.cuda.get_device_name(device)
        meta["gpu_count_visible"] = torch.cuda.device_count()
    return meta


# ----------------------------------------------------------------------------- output
def write_json(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, default=str)


def write_csv(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a message) when not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError:
        print("matplotlib not installed: skipping the PNG", file=sys.stderr)
        return None


def fmt(v, digits=1):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if not math.isfinite(v):
        return "-"
    return f"{v:.{digits}f}"


ERROR_LINE_CHARS = 160


def error_line(e):
    """An exception as one line for a row's status (a table cell, a JSON field): its type and the first line of its
    message, cut at ERROR_LINE_CHARS, "..." marking a cut. A CUDA error's message runs to five lines of advice, which
    broke the tables it stood in (bench_hf_model's graph decode, session 46). error_status prints the whole text."""
    lines = str(e).splitlines() or [""]
    first = lines[0][:ERROR_LINE_CHARS]
    cut = len(lines) > 1 or len(lines[0]) > ERROR_LINE_CHARS
    return f"{type(e).__name__}: {first}{' ...' if cut else ''}"


def error_status(e, what, prefix="error"):
    """`prefix: error_line(e)`, a failed row's status; the whole message goes to stderr, with `what` failed and this
    rank."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    print(f"rank {rank}: {what}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    return f"{prefix}: {error_line(e)}"


TABLE_CELL_CHARS = 48


def print_table(headers, rows):
    """Headers, a rule, then the rows, each column right-aligned. A cell longer than TABLE_CELL_CHARS (a failed row's
    status: error_line's text runs to 170 characters) would widen its column on every row (session 46's graph decode
    column was 180 wide): it goes under the table as a note, `[n]` in its place, one note for each distinct text."""
    notes = {}

    def cell(c):
        text = str(c)
        return text if len(text) <= TABLE_CELL_CHARS else f"[{notes.setdefault(text, len(notes) + 1)}]"

    cells = [[cell(c) for c in r] for r in rows]
    widths = [max([len(str(h))] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(str(h).rjust(w) for h, w in zip(headers, widths))
    print(line)
    print("-" * len(line))
    for r in cells:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    for text, n in notes.items():
        print(f"[{n}] {text}")
