"""python -m moe_a2a.trace: the views of a trace file from the command line (the package's docstring)."""

import argparse
import sys

from .build import load
from .events import KERNELS
from .plot import plot_png
from .views import blocks, chain, check, late, lineup, summary, timeline


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m moe_a2a.trace",
        description=sys.modules[__package__].__doc__,  # the package's: the API and every command
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary", help="time per stage per rank, slowest blocks, waits by peer")
    s.add_argument("trace")
    s.add_argument("--png", help="also draw a timeline per rank into this PNG")
    s.add_argument("--top", type=int, default=5)
    c = sub.add_parser("check", help="validate a trace (nesting, spans, every kernel on every rank)")
    c.add_argument("trace")
    t = sub.add_parser("timeline", help="one block's stages, us from its kernel start, median over runs")
    t.add_argument("trace")
    t.add_argument("--block", type=int, default=0, help="block index (default 0: the one with work at any batch)")
    t.add_argument("--waves", action="store_true", help="also each wave's stages (median over runs)")
    ch = sub.add_parser("chain", help="each stage over all blocks of its kernel, and the gaps between kernels")
    ch.add_argument("trace")
    b = sub.add_parser("blocks", help="every block's stages in one run of a kernel, per rank")
    b.add_argument("trace")
    b.add_argument("--kernel", default=KERNELS[0], choices=KERNELS, help=f"default {KERNELS[0]}")
    b.add_argument("--run", type=int, default=0, help="which run of the kernel in the trace (default 0)")
    b.add_argument("--every", type=int, default=1, help="one block in this many (default every block)")
    la = sub.add_parser("late", help="blocks whose stage ends behind the others', in most runs, per rank")
    la.add_argument("trace")
    la.add_argument("--kernel", default=KERNELS[0], choices=KERNELS, help=f"default {KERNELS[0]}")
    la.add_argument("--threshold", type=float, default=0.5, help="us behind the stage's median end (default 0.5)")
    la.add_argument("--top", type=int, default=10, help="at most this many (stage, block) a rank (default 10)")
    lu = sub.add_parser("lineup", help="each run of a kernel with the ranks on one clock, per stage")
    lu.add_argument("trace")
    lu.add_argument("--kernel", default=KERNELS[0], choices=KERNELS, help=f"default {KERNELS[0]}")
    lu.add_argument("--run", type=int, default=None, help="only this run (default every one)")
    args = p.parse_args(argv)
    trace = load(args.trace)
    if args.cmd == "late":
        print(late(trace, args.kernel, args.threshold, args.top))
        return 0
    if args.cmd == "lineup":
        print(lineup(trace, args.kernel, args.run))
        return 0
    if args.cmd == "blocks":
        print(blocks(trace, args.kernel, args.run, max(1, args.every)))
        return 0
    if args.cmd == "chain":
        print(chain(trace))
        return 0
    if args.cmd == "timeline":
        print(timeline(trace, args.block, by_wave=args.waves))
        return 0
    if args.cmd == "check":
        problems = check(trace)
        for line in problems[:50]:
            print(line)
        print(f"{len(problems)} problem(s)" if problems else "trace OK")
        return 1 if problems else 0
    print(summary(trace, args.top))
    if args.png:
        plot_png(trace, args.png)
        print(f"wrote {args.png}")
    return 0
