"""The speed targets moe_a2a is judged by, as data: issue 35's table (two real GPUs; its fp8 row
replaces issue 13's), and issue 40's training rounds (LAYER_TARGETS). World 2, CUDA-graph steady
state unless it says eager, median, max over ranks. benchmarks/perf_report.py sets a run's numbers
next to them; targets live here and in benchmarks, never in timed tests. The issue's unequal-pair
target (any unequal pair <= 1.10x the equal pair at the larger count) is a ratio between rows:
perf_report.py prints it next to these (unequal_lines).

Each target names the result file and row it is read from (the row's "shape", its per-rank counts
spec "counts" (bench_graph.py --counts; "max", every rank at the shape's max tokens, and rows from
before --counts count as "max"; "drawn", each rank's count uniform in 1..max as the challenge draws
it) and, for fp8, its "dispatch_dtype"), the measured field, and the bound in microseconds (or a
ratio)."""

import dataclasses
from typing import Optional

DEEPSEEK_V3 = "E256-K8-H7168"


@dataclasses.dataclass(frozen=True)
class Target:
    what: str  # as the issue words it
    source: str  # result file: bench_graph.json or fp8/bench_graph.json
    shape: str  # the row's "shape"
    field: str  # the measured quantity in that row
    bound: float  # at most this (us, or a ratio for fp8)
    dispatch_dtype: Optional[str] = None  # the row's "dispatch_dtype" when it matters
    unit: str = "us"
    counts: str = "max"  # the row's "counts" (missing in older files: "max")


def _graph(shape: str, bound: float, what: Optional[str] = None, counts: str = "max") -> Target:
    what = what or f"graph d+c {shape}" + (f", counts {counts}" if counts != "max" else "")
    return Target(what, "bench_graph.json", shape, "graph_us_median", bound, counts=counts)


TARGETS = (
    _graph("E8-K2-H6144-T16", 13, counts="drawn"),
    _graph("E64-K6-H2048-T32", 13, counts="drawn"),
    _graph("E128-K8-H4096-T256", 30, counts="drawn"),
    _graph("E256-K8-H7168-T256", 40, counts="drawn"),
    _graph(f"{DEEPSEEK_V3}-T1", 12, "graph d+c DeepSeek-V3 T=1"),
    _graph(f"{DEEPSEEK_V3}-T128", 26, "graph d+c DeepSeek-V3 T=128"),
    Target(
        "graph d+c / in-run floor, DeepSeek-V3 T=4096",
        "bench_graph.json",
        f"{DEEPSEEK_V3}-T4096",
        "graph_x_floor",
        1.3,
        unit="x",
    ),
    Target(
        "eager dispatch DeepSeek-V3 T=4096", "bench_graph.json", f"{DEEPSEEK_V3}-T4096", "eager_dispatch_us_median", 230
    ),
    Target(
        "eager combine DeepSeek-V3 T=4096", "bench_graph.json", f"{DEEPSEEK_V3}-T4096", "eager_combine_us_median", 230
    ),
    Target(
        "fp8 dispatch / bf16 dispatch, DeepSeek-V3 T=4096 (eager)",
        "fp8/bench_graph.json",
        f"{DEEPSEEK_V3}-T4096",
        "eager_dispatch_vs_token_dtype",
        0.55,
        dispatch_dtype="e4m3fn",  # bench_graph.py --fp8 e4m3fn
        unit="x",
    ),
)


@dataclasses.dataclass(frozen=True)
class LayerTarget:
    """Issue 40: one quantity of bench_moe_layer.json over another, at T tokens on every rank ("max"
    counts): a round's median over its forward mirror's, or a round's p90 over its p10."""

    what: str
    tokens: int
    phase: str
    over: str  # the phase whose `over_field` divides
    bound: float  # at most this ratio
    field: str = "us_median"
    over_field: str = "us_median"


LAYER_SOURCE = "bench_moe_layer.json"  # the file every LayerTarget reads
LAYER_TARGETS = (
    tuple(
        LayerTarget(f"backward of combine / forward dispatch, T={T}", T, "combine-bwd", "dispatch", 1.1)
        for T in (128, 512, 2048)
    )
    + tuple(
        LayerTarget(f"backward of dispatch / forward combine, T={T}", T, "dispatch-bwd", "combine", 1.1)
        for T in (128, 512, 2048)
    )
    + (
        LayerTarget(
            "forward dispatch p90 / p10 in the layer, T=128", 128, "dispatch", "dispatch", 1.2, "us_p90", "us_p10"
        ),
    )
)
