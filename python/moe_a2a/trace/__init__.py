"""In-kernel profiler traces: export to Chrome JSON (opens in ui.perfetto.dev), check,
summarise, plot.

    ep = moe_a2a.AllToAll(..., profile=True)      # needs a build with MOE_A2A_PROFILE=1
    ... ep.dispatch / ep.combine ...
    moe_a2a.trace.save("trace.json")             # collective; rank 0 writes the file

    python -m moe_a2a.trace summary trace.json [--png timeline.png]     (trace.json.gz too)
    python -m moe_a2a.trace timeline trace.json [--block B] [--waves]
    python -m moe_a2a.trace chain trace.json
    python -m moe_a2a.trace blocks trace.json [--kernel K] [--run N] [--every S]
    python -m moe_a2a.trace lineup trace.json [--kernel K] [--run N]
    python -m moe_a2a.trace late trace.json [--kernel K] [--threshold US] [--top N]
    python -m moe_a2a.trace check trace.json

Layout: pid = rank + 1 ("rank N"); one track per wave of a block, tid = block * waves + wave + 1
("block B wave W"); complete events ("ph": "X") in microseconds from the earliest event, on
rank 0's clock. Each rank's clock is mapped onto rank 0's through the ping-pong samples taken
before and after the run (offset from the fastest round trip, drift linear in between); the
error bound (half that round trip) is written into the trace.

Everything except save() is pure Python (json; matplotlib for --png): event names travel in
the trace, so these tools never need the compiled extension.

Modules: clock (the ranks' clocks on rank 0's), build (build_trace, save, load), views (the
text reports), plot (--png), cli (the commands), events (the names and events they share).
"""

from .build import build_trace, load, save
from .cli import main
from .clock import ClockMap, fit_clock, ticks_to_ns
from .events import KERNELS, TRACE_VERSION, complete_events, kernel_of, rank_names
from .plot import plot_png
from .views import blocks, chain, check, late, lineup, summary, timeline

__all__ = [
    "KERNELS",
    "TRACE_VERSION",
    "ClockMap",
    "blocks",
    "build_trace",
    "chain",
    "check",
    "complete_events",
    "fit_clock",
    "kernel_of",
    "late",
    "lineup",
    "load",
    "main",
    "plot_png",
    "rank_names",
    "save",
    "summary",
    "ticks_to_ns",
    "timeline",
]
