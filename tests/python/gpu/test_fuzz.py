"""Property-based test (issue 14, item 6): hypothesis draws AllToAll shapes (experts per rank,
top-k, hidden, max tokens, dtype, fp8 dispatch or not, layout, expert alignment, grid size) and a
round on them (every rank's token count, 0 and max included; routing; masked slots; duplicate ids;
fused, split or, without fp8, backward), and each round must match the reference (dispatch
exactly, fp8 bytes and scales exactly, combine and gradients within tolerance).

Every rank must run the same examples in the same order (each builds a collective AllToAll), so
the draws are derandomized (a seed from the test's source, the same on every rank), nothing is
read from or saved to an example database, no health check or deadline can stop one rank and not
the others, and the ranks agree on each example's outcome before any of them raises. Shrinking
is off: a failing example is reported as drawn. MOE_A2A_FUZZ_EXAMPLES sets the number of examples
(default 12; a few seconds on one GPU)."""

import dataclasses
import os

import pytest

hypothesis = pytest.importorskip("hypothesis")
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mixed_rounds import ROUTINGS, Bank, Shape, Spec, check_round

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


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)
@given(case=rounds())
def test_round_matches_reference(case, rank, world):
    shape, spec = case
    spec = dataclasses.replace(spec, tokens=spec.tokens[:world])
    device = torch.device("cuda", torch.cuda.current_device())
    with shape.build(dist.group.WORLD, world, device) as ep:
        check_round(ep, shape, spec, Bank(shape, world, rank, device), rank, world, device)
