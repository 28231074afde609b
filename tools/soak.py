#!/usr/bin/env python3
"""The long soak (issue 14, item 6), under torchrun, one process per GPU:

    torchrun --nproc-per-node=<GPUs> tools/soak.py [--rounds 100000] [--check-every 1000] [--out DIR]
    MOE_A2A_TEST_ONE_GPU=1 torchrun --nproc-per-node=2 tools/soak.py --max-minutes 8    # one GPU
    torchrun --nproc-per-node=2 tools/soak.py --profile sanitize                       # tools/sanitize.sh

What runs is tests/python/gpu/soak_schedule.py (mixed shapes, dtypes, layouts, token counts,
routings, masked slots, duplicate ids, fused / split / backward rounds and two rounds in flight,
every round checked on the GPU (tests/python/gpu/round_checks.py), every check_every-th round
also on the host against the reference, every kind of round across the epoch wrap points). The
process group is gloo (it only sets the AllToAlls up). Rank 0 prints SOAK_RESULT {json} and, with
--out, writes soak-<profile>.json. Exit status 1 if any round failed (every rank raises at the
first failed check: the ranks agree on each checked round).
"""

import argparse
import datetime
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "tests", "python", "gpu")]
# isort: off
import moe_a2a  # noqa: E402,F401  (first: sets the no-multicast environment before torch loads)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import soak_schedule  # noqa: E402
# isort: on


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=sorted(soak_schedule.PROFILES), default="soak")
    p.add_argument("--shapes", help="only these of the profile's shapes, by index (e.g. 7 or 0,7)")
    p.add_argument("--rounds", type=int, help="default: the profile's (soak: 100000)")
    p.add_argument("--check-every", type=int, help="default: the profile's (soak: 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=5.0, help="AllToAll(timeout_s=); raise it under a sanitizer")
    p.add_argument("--max-minutes", type=float, help="stop early, at a checked round, once this much time has passed")
    p.add_argument("--out", help="directory for soak-<profile>.json")
    args = p.parse_args()
    if "RANK" not in os.environ:
        sys.exit("run under torchrun: torchrun --nproc-per-node=<GPUs> tools/soak.py")

    one_gpu = os.environ.get("MOE_A2A_TEST_ONE_GPU") == "1"
    local = 0 if one_gpu else int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    log = (lambda line: print(line, flush=True)) if rank == 0 else (lambda line: None)
    summary = soak_schedule.run(
        dist.group.WORLD,
        rank,
        world,
        torch.device("cuda", local),
        profile=args.profile,
        shapes=None if args.shapes is None else [int(j) for j in args.shapes.split(",")],
        rounds=args.rounds,
        check_every=args.check_every,
        seed=args.seed,
        timeout_s=args.timeout_s,
        max_seconds=None if args.max_minutes is None else 60 * args.max_minutes,
        log=log,
    )
    if rank == 0:
        summary["one_gpu"] = one_gpu
        print("SOAK_RESULT " + json.dumps(summary), flush=True)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, f"soak-{args.profile}.json"), "w") as f:
                json.dump(summary, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
