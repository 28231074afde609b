"""Where the transformers integration takes moe_a2a's grouped_gemv (no GPU needed: the rule, not
the kernel, which tests/python/gpu/test_grouped_gemv.py checks; test_transformers_integration.py
checks what the integration asks it)."""

import math

import pytest
import torch

from moe_a2a import grouped_gemv as gg


@pytest.mark.parametrize("rows,want", [(0.0625, 1), (0.099, 1), (0.1, 0), (0.25, 0), (2.0, 0), (4.0, 0)])
def test_rows_per_pass(rows, want):
    assert gg.rows_per_pass(rows) == want


def test_never_on_the_cpu_or_past_the_limit():
    x, w = torch.zeros(4, 64, dtype=torch.bfloat16), torch.zeros(8, 32, 64, dtype=torch.bfloat16)
    assert not gg.applies(x, w, 0.5)  # a CPU tensor: the op is the GPU's
    assert not gg.applies(x.to("meta"), w.to("meta"), 0.5)
    assert not gg.applies(x, w, math.inf)
