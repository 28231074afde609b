"""Property-based test (issue 14, item 6): hypothesis draws AllToAll shapes (experts per rank,
top-k, hidden, max tokens, dtype, fp8 dispatch or not, layout, expert alignment, grid size) and a
round on them (every rank's token count, 0 and max included; routing; masked slots; duplicate ids;
fused, split or, without fp8, backward), and each round must match the reference (dispatch
exactly, fp8 bytes and scales exactly, combine and gradients within tolerance).

Every rank must run the same examples in the same order (each builds a collective AllToAll).
Drawing on every rank with the same seed is not enough: hypothesis adapts what it draws next to
what it saw while the test ran, and at world 4 one rank drew another hidden size than the others
for the same example. So rank 0 draws the examples first, with nothing run in between
(derandomized: a seed from the source; no example database, deadline or health check), every
rank takes rank 0's list, and the ranks agree on each example's outcome before any of them
raises; a failure names the example. MOE_A2A_FUZZ_EXAMPLES sets the number of examples (default
12; a few seconds on one GPU)."""

import dataclasses
import os

import pytest

hypothesis = pytest.importorskip("hypothesis")
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mixed_rounds import ROUTINGS, Bank, Shape, Spec, check_round

from moe_a2a._collective import all_gather

EXAMPLES = int(os.environ.get("MOE_A2A_FUZZ_EXAMPLES", "12"))
MAX_WORLD = 8  # token counts are drawn for this many ranks; the first `world` are used


@st.composite
def rounds(draw):
    experts_per_rank = draw(st.integers(1, 8))
    layout = draw(st.sampled_from(["padded", "packed"]))
    max_tokens = draw(st.integers(1, 64))
    fp8 = draw(st.sampled_from([None, None, None, torch.float8_e4m3fn, torch.float8_e4m3fnuz]))
    shape = Shape(
        experts_per_rank=experts_per_rank,
        topk=draw(st.integers(1, min(8, 2 * experts_per_rank))),  # at most num_experts at world 2
        hidden=(8 if fp8 is None else 16) * draw(st.integers(1, 160)),  # fp8 dispatch needs H % 16 == 0
        max_tokens=max_tokens,
        dtype=draw(st.sampled_from([torch.bfloat16, torch.float16, torch.float32])),
        layout=layout,
        alignment=draw(st.sampled_from([1, 4, 16])) if layout == "packed" else 1,
        num_sms=draw(st.sampled_from([None, 1, 3])),
        fp8=fp8,
    )
    count = st.one_of(st.just(0), st.just(max_tokens), st.integers(0, max_tokens))
    spec = Spec(
        tokens=tuple(draw(st.lists(count, min_size=MAX_WORLD, max_size=MAX_WORLD))),
        routing=draw(st.sampled_from(ROUTINGS)),
        masked=draw(st.sampled_from([0.0, 0.3, 1.0])),
        duplicates=draw(st.sampled_from([0.0, 0.5])),
        kind=draw(st.sampled_from(shape.kinds())),
        seed=draw(st.integers(0, 2**31 - 1)),
        int64_ids=draw(st.booleans()),
    )
    return shape, spec


def drawn_rounds(n: int) -> list:
    """Up to n examples of rounds(), drawn by hypothesis with nothing run between the draws."""
    cases = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(case=rounds())
    def collect(case):
        cases.append(case)

    collect()
    return cases


def test_round_matches_reference(rank, world):
    cases = all_gather(drawn_rounds(EXAMPLES) if rank == 0 else None, dist.group.WORLD)[0]
    assert cases, "hypothesis drew no example"
    device = torch.device("cuda", torch.cuda.current_device())
    for shape, spec in cases:
        spec = dataclasses.replace(spec, tokens=spec.tokens[:world])
        with shape.build(dist.group.WORLD, world, device) as ep:
            check_round(ep, shape, spec, Bank(shape, world, rank, device), rank, world, device)
