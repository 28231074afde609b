"""The soak's GPU check of combine's output (tests/python/gpu/round_checks.py) accepts what the
host check accepts, run on the host.

Session 44's soak at world 3 on one H200 failed a round's GPU "out" check that its host check
(and round_checks.explain_out) found right: the soak's fp8 shape, a token whose values sat just
past fp8's half steps, experts multiplying by 3. The GPU check measured out from the tokens
before fp8, with fp8's rounding as slack, which left too little room for the bf16 roundings on
both sides; it now measures from the tokens as the experts saw them, as the host check does.
This replays that round's inputs (every rank's inputs derive from the round's description, so no
GPU is needed) with out at the reference, a bf16 step off either way, and wrong at one value.
The GPU tests' modules import their own conftest, so they run in a process of their own.
"""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = """
import json, sys
import torch
import mixed_rounds, round_checks, soak_schedule

WORLD, RANK = 3, 2
SHAPE = soak_schedule.PROFILES["soak"].shapes[7]
SPEC = mixed_rounds.Spec((18, 28, 27), "uniform", kind="fused", seed=882345815, int64_ids=True)  # seed 0's round 1813
bank = mixed_rounds.Bank(SHAPE, WORLD, RANK, "cpu")
everyone = [mixed_rounds.rank_inputs(SHAPE, SPEC, bank, r, WORLD) for r in range(WORLD)]
out = mixed_rounds.reference_out(everyone, SHAPE, RANK, WORLD).to(SHAPE.dtype)  # the host check's want


def fails(value):
    o = mixed_rounds.Outcome(SPEC, None, value)
    every = round_checks.Everyone(SHAPE, o, bank, WORLD, "cpu")
    return bool(round_checks.combine_failures(o, SHAPE, every, bank, RANK)["out"])


wrong = out.clone()
wrong[5, 100] = wrong[5, 100] * 1.05 + 0.01
print(json.dumps({
    "shape": [SHAPE.experts_per_rank, SHAPE.topk, SHAPE.hidden, str(SHAPE.fp8)],
    "reference": fails(out),
    "step down": fails(torch.nextafter(out, torch.full_like(out, -float("inf")))),
    "step up": fails(torch.nextafter(out, torch.full_like(out, float("inf")))),
    "wrong": fails(wrong),
}))
"""


@pytest.fixture(scope="module")
def verdicts():
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "gpu"), os.path.join(HERE, "..", "..", "..", "python")]),
    )
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_round_is_on_the_soaks_fp8_shape(verdicts):
    assert verdicts["shape"] == [32, 8, 7168, "torch.float8_e4m3fn"]


@pytest.mark.parametrize("out", ["reference", "step down", "step up"])
def test_what_the_host_check_accepts_passes(verdicts, out):
    assert verdicts[out] is False


def test_a_wrong_out_fails(verdicts):
    assert verdicts["wrong"] is True
