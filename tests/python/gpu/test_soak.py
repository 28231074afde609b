"""The short soak (issue 14, item 6) in the default GPU run: 300 mixed rounds on four AllToAlls
(both layouts, three dtypes, 0 and max tokens, skewed and single-expert routing, masked slots,
duplicate ids, fused, split and backward rounds), every 25th checked against the reference, and
every kind of round run across the wrap of the 64-bit round counter with its data checked. The
long one is tools/soak.py (10^5 rounds); soak_schedule.py says what both run."""

import json
import os

import soak_schedule
import torch
import torch.distributed as dist


def test_short_soak(rank, world):
    device = torch.device("cuda", torch.cuda.current_device())
    summary = soak_schedule.run(dist.group.WORLD, rank, world, device, profile="short")
    profile = soak_schedule.PROFILES["short"]
    assert summary["rounds"] >= profile.rounds
    # per wrap shape and point: the 5-round sequence started 1..5 rounds before the point
    starts = soak_schedule.WRAP_SEQUENCE_ROUNDS
    assert summary["wrap_rounds"] == len(profile.wrap_shapes) * len(profile.wrap_points) * starts * starts
    if rank == 0:
        print("\nshort soak: " + json.dumps(summary))
        out = os.environ.get("MOE_A2A_RESULTS_DIR")
        if out:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "soak-short.json"), "w") as f:
                json.dump(summary, f, indent=1)
