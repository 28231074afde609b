"""The skeleton every benchmark script shares, which each fills with its own cases: the parser
and the arguments several scripts take, the process group's start and end, the loop over the
cases, the settings, JSON + CSV and PNG files. What is measured and how (timing, statistics,
inputs) stays in common.py; what a script measures, and its tables, stay in the script.

A script's main() reads:

    args = parse_args(argv)                       # scaffold.parser() + scaffold.add_*()
    ctx = common.init_benchmark()
    rows = scaffold.run_cases(ctx, cases, header, lambda case: bench_case(ctx, case, args))
    if ctx.rank == 0:
        print_report(rows)                        # common.print_table
        scaffold.write_results(args.out, "bench_x", {"meta": ..., "config": scaffold.settings(args), "rows": rows})
    scaffold.finish()
"""

import argparse
import os

import common  # (before torch: pins NVLink multicast off before torch.distributed loads)
import torch
import torch.distributed as dist

RESULTS_DIR = os.path.join(common.BENCH_DIR, "results")  # every script's default --out


# ----------------------------------------------------------------------------- arguments
def parser(doc):
    """The parser of a script: its docstring as the description, kept as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)


def add_out(p, what="JSON, CSV and PNG"):
    p.add_argument("--out", default=RESULTS_DIR, help=f"folder for {what} (default benchmarks/results/)")


def add_layout(p, default):
    p.add_argument(
        "--layout",
        default=default,
        choices=["padded", "packed"] if default == "padded" else ["packed", "padded"],
        help=f"moe_a2a's dispatch layout (default {default})",
    )


def add_iters(p, default, what="timed iterations per measurement"):
    p.add_argument("--iters", type=int, default=default, help=f"{what} (default {default})")


def add_warmup(p, default):
    p.add_argument("--warmup", type=int, default=default, help=f"untimed iterations first (default {default})")


def add_seed(p, help=None):
    p.add_argument("--seed", type=int, default=0, help=help)


def add_switch(p, flag, help, default=True):
    """--flag / --no-flag (argparse.BooleanOptionalAction)."""
    p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help)


def add_no_microbench(p, help="skip measuring B, B_hbm and L; use BENCHMARKS.md's 2 x H200 values (labelled)"):
    p.add_argument("--no-microbench", action="store_true", help=help)


def add_capacity(p, what):
    """--capacity N: tokens a rank `what` is built for (max_num_tokens); 0, the default, builds each
    for its own T. check_capacity holds it at or above every T asked."""
    p.add_argument(
        "--capacity",
        type=int,
        default=0,
        help=f"tokens a rank {what} is built for (max_num_tokens), at least every T\n(default: each T itself)",
    )


def check_capacity(p, args, largest, flag):
    """A p.error if --capacity is below the largest T asked (`flag` names where that T came from)."""
    if args.capacity and args.capacity < largest:
        p.error(f"--capacity {args.capacity}: below {flag} {largest}")


def add_counts(p):
    """--counts: per-rank token counts (common.counts_for_shape), as bench_graph and bench_multinode take them."""
    p.add_argument(
        "--counts",
        default="max",
        help='per-rank token counts, ";"-separated specs, each shape run once per spec: "max" (default:\n'
        'every rank the shape\'s max tokens), "drawn" (uniform in 1..max per rank and routing, as the\n'
        'challenge draws them), "a/b[/c...]" (rank r gets entry r %% n, 0 allowed), or "issue35" (the\n'
        "unequal pairs of issue 35 that fit each shape, plus drawn and 1/1)",
    )


def add_fp8(p, what):
    """--fp8 FORMAT: every shape also with fp8 dispatch through `what`, next to the token dtype's."""
    p.add_argument(
        "--fp8",
        choices=sorted(common.FP8_DTYPES),
        default=None,
        help=f"also every shape with fp8 dispatch ({what}), next to the token dtype's",
    )


def shapes_and_counts(p, args, shapes_text):
    """args.shape_list from `shapes_text` and args.count_list (--counts per shape), every spec
    checked against every shape before anything runs; a bad one is a p.error naming both."""
    args.shape_list = common.parse_shapes(shapes_text)
    try:
        args.count_list = [common.counts_for_shape(args.counts, shape) for shape in args.shape_list]
    except ValueError as e:
        p.error(str(e))


def ints(p, flag, text):
    """'1,2,...' -> [int], each >= 1, or p.error naming the flag."""
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        p.error(f"{flag}: positive integers, comma-separated")
    return values


def sizes(p, flag, text, names):
    """'a,b,...' -> one positive int per name of `names`, or p.error naming the flag."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != len(names) or min(values) < 1:
        p.error(f"{flag} wants {','.join(names)} (positive integers)")
    return values


def names(p, flag, text, choices):
    """'a,b,...' -> [name], each one of `choices` and at least one, or p.error naming the flag."""
    values = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in values if s not in choices]
    if bad or not values:
        p.error(f"{flag}: choose from {list(choices)}, got {bad or 'none'}")
    return values


def at_least(p, args, **minimums):
    """p.error unless args.<name> >= minimum for every name (flags spelled with '-')."""
    low = [f"--{k.replace('_', '-')} >= {m}" for k, m in minimums.items() if getattr(args, k) < m]
    if low:
        p.error("need " + ", ".join(low))


def settings(args, without=()):
    """The run's arguments for the JSON: vars(args) less `without`, torch dtypes as their names
    (what json's default=str writes for them)."""
    return {k: (str(v) if isinstance(v, torch.dtype) else v) for k, v in vars(args).items() if k not in without}


# ----------------------------------------------------------------------------- running
def run_cases(ctx, cases, bench_case, header=None, after=None):
    """The per-case loop: for each case, rank 0 prints header(case) (when given), every rank
    runs bench_case(case) -> [row], the rows are added, and after(rows, new) runs on rank 0
    (when given: a line per case, a partial file). Returns every row, in case order."""
    rows = []
    for case in cases:
        if header is not None and ctx.rank == 0:
            print(header(case), flush=True)
        new = bench_case(case)
        rows += new
        if after is not None and ctx.rank == 0:
            after(rows, new)
    return rows


def shape_runs(args):
    """The runs of a script over shapes and --counts: (shape, counts spec, fp8 format or None), each
    spec of each shape with the token dtype and, with --fp8, again with fp8 dispatch right after."""
    return [
        (shape, counts, fp8)
        for shape, specs in zip(args.shape_list, args.count_list)
        for counts in specs
        for fp8 in ([None, args.fp8] if args.fp8 else [None])
    ]


def finish():
    """The end of a run: every rank waits for the others (rank 0 writes the files), then the
    process group ends."""
    dist.barrier()
    dist.destroy_process_group()


# ----------------------------------------------------------------------------- files
def write_results(out_dir, stem, doc, say=True):
    """doc to OUT/stem.json and doc["rows"] to OUT/stem.csv; prints "wrote OUT/stem.json/.csv"
    when `say`. Returns OUT/stem."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, stem)
    common.write_json(path + ".json", doc)
    common.write_csv(path + ".csv", doc["rows"])
    if say:
        print(f"wrote {path}.json/.csv")
    return path


def partial_saver(ctx, args, stem, **meta):
    """save(rows, complete) for rank 0 to call after every run and at the end: the rows so far to
    OUT/stem.json/.csv, with common.metadata, the settings and `meta`; "complete" is false until the
    end, so a run that dies part-way leaves what it measured."""
    doc_meta = {}

    def save(rows, complete):
        if not doc_meta:
            doc_meta.update(common.metadata(ctx), args=settings(args) | {"shape_list": None}, **meta)
        doc_meta["complete"] = complete
        write_results(args.out, stem, {"meta": doc_meta, "rows": rows}, say=False)

    return save


def save_figure(plt, fig, path, rect=None):
    """A plot's figure, laid out (tight, within `rect`), to the PNG `path`, and closed."""
    fig.tight_layout(rect=rect)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")
