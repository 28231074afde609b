"""fake_gemm.py, the benchmarks' stand-in for the experts: the torch fallback and the Triton kernel
under the interpreter.

CPU only (no GPU, no second rank): python -m pytest benchmarks/tests
"""

import os
import subprocess
import sys

import common
import pytest
import torch
from fake_gemm import scale_experts, scale_packed, scale_segments


def test_scale_experts_torch_fallback():
    x = torch.randn(3, 5, 8).to(torch.bfloat16)
    n = torch.tensor([0, 5, 2], dtype=torch.int32)
    y = scale_experts(x, n, 3, out=x.clone())
    for e in range(3):
        torch.testing.assert_close(y[e, : n[e]], x[e, : n[e]] * 3, rtol=0, atol=0)
        torch.testing.assert_close(y[e, n[e] :], x[e, n[e] :], rtol=0, atol=0)


def test_scale_segments_torch_fallback_packed():
    """The torch fallback on a packed buffer: segments back to back, an empty one, a gap of
    padding rows between two, rows after the last; in place and into another tensor."""
    x = torch.randn(12, 8).to(torch.bfloat16)
    start = torch.tensor([0, 3, 3, 7], dtype=torch.int32)
    count = torch.tensor([3, 0, 2, 4], dtype=torch.int32)
    valid = [0, 1, 2, 3, 4, 7, 8, 9, 10]
    y = scale_segments(x, torch.empty_like(x), start, count, 5)
    assert torch.equal(y[valid], x[valid] * 5)
    assert torch.equal(y[[5, 6, 11]], x[[5, 6, 11]])  # padding keeps its value
    z = x.clone()
    scale_segments(z, z, start, count, 5)
    assert torch.equal(z, y)
    # packed helper: offsets with E + 1 entries
    offsets = torch.tensor([0, 3, 3, 5], dtype=torch.int32)
    n = torch.tensor([3, 0, 2], dtype=torch.int32)
    p = scale_packed(x, offsets, n, 2, out=torch.empty_like(x))
    assert torch.equal(p[:5], x[:5] * 2) and torch.equal(p[5:], x[5:])
    assert scale_segments(x, y, start[:0], count[:0], 3) is y  # no segments: nothing to do


def test_scale_segments_triton_interpreter():
    """The persistent Triton kernel under TRITON_INTERPRET=1 (CPU), in a child so the flag is
    set before triton loads: fewer programs than work items, empty segments, padding between
    segments, a segment longer than one row block, the padded and the packed helpers."""
    pytest.importorskip("triton")
    code = (
        r"""
import sys, torch
sys.path.insert(0, %r)
import fake_gemm
fake_gemm.backend = lambda device: "triton"
x = torch.randn(23, 1500).to(torch.bfloat16)
y = torch.full_like(x, 7.0)
start = torch.tensor([0, 2, 2, 6, 13], dtype=torch.int64)
count = torch.tensor([2, 0, 3, 6, 9], dtype=torch.int32)
fake_gemm.scale_segments(x, y, start, count, 4)
rows = [0, 1, 2, 3, 4] + list(range(6, 12)) + list(range(13, 22))
assert torch.equal(y[rows], x[rows] * 4), "scaled rows"
for r in (5, 12, 22):
    assert torch.equal(y[r], torch.full_like(y[r], 7.0)), "row outside every segment untouched"
assert fake_gemm._programs(x.device, 23) == 6  # 23 rows / 4: min(4 per SM x 2 SMs, 6 blocks)
e = torch.randn(3, 10, 64).to(torch.float16)
n = torch.tensor([10, 0, 5], dtype=torch.int32)
out = fake_gemm.scale_experts(e, n, 3, out=torch.zeros_like(e))
assert torch.equal(out[0], e[0] * 3) and torch.equal(out[2, :5], e[2, :5] * 3)
assert not out[1].any() and not out[2, 5:].any()
p = torch.randn(16, 64).to(torch.bfloat16)
off = torch.tensor([0, 5, 5, 11], dtype=torch.int32)
cnt = torch.tensor([5, 0, 6], dtype=torch.int32)
q = fake_gemm.scale_packed(p, off, cnt, 2, out=torch.zeros_like(p))
assert torch.equal(q[:11], p[:11] * 2) and not q[11:].any()
print("ok")
"""
        % common.BENCH_DIR
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
