"""The local experts' linear layers at a few rows an expert: moe_a2a's `grouped_gemv` op.

A decode step feeds each MoE layer a token or a few a rank, so each local expert gets one or
two rows. torch._grouped_mm then runs tiles that are almost all padding, and its time is about
twice what reading the active experts' weights once takes (a decode step's MoE layer is that
read). `grouped_gemv` streams each active expert's weights once a pass of up to
`rows_per_pass` rows and computes the dot products in fp32 (csrc/experts/grouped_gemv.cu).

    y = grouped_gemv(x, w, offsets, counts)     # w [E, out, in] (nn.Linear's layout per expert)

y[r] = x[r] @ w[e].T for every row r of expert e (rows offsets[e] .. offsets[e] + counts[e] - 1,
dispatch's packed layout); rows of no expert are undefined, as torch._grouped_mm leaves them.
y is a fresh tensor. No autograd: `applies()` says where the transformers integration uses it
(no gradient asked for, few rows an expert, a layout it reads), and MOE_A2A_GROUPED_GEMV=0 turns
that off (a diagnostic switch: one build timed both ways).
"""

import os

import torch

__all__ = ["ROWS_PER_EXPERT_LIMIT", "applies", "grouped_gemv", "rows_per_pass"]

# applies() takes the small-rows kernel where the local experts get at most this many rows each
# on average, when every rank feeds the AllToAll its max_num_tokens. On one H200
# (benchmarks/bench_experts.py, docs/results/2026-11-28-h100x2-session34/, call 2) it took 18-43%
# less time than torch._grouped_mm up to 2 rows an expert and was within 6% of it either way at 4.
ROWS_PER_EXPERT_LIMIT = 3.0
MAX_EXPERTS = 65535  # kGemvMaxExperts (csrc/experts/grouped_gemv.h): one call's most local experts
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def rows_per_pass(rows_per_expert: float) -> int:
    """Rows a pass takes at `rows_per_expert` rows an expert on average: 2 up to 1.5 (an expert
    often gets two where the average is one; 1 was never faster), else 4."""
    return 2 if rows_per_expert <= 1.5 else 4


def applies(x: torch.Tensor, w: torch.Tensor, rows_per_expert: float) -> bool:
    """Whether grouped_gemv serves x [rows, in] @ w [E, out, in]^T where the experts get
    `rows_per_expert` rows each on average: a GPU, one of its dtypes, w contiguous along `in` and
    16-byte aligned, at most MAX_EXPERTS experts and ROWS_PER_EXPERT_LIMIT rows an expert, no
    gradient asked for, and MOE_A2A_GROUPED_GEMV not 0."""
    if os.environ.get("MOE_A2A_GROUPED_GEMV", "1") == "0" or rows_per_expert > ROWS_PER_EXPERT_LIMIT:
        return False
    if x.device.type != "cuda" or x.dim() != 2 or w.dim() != 3 or x.dtype not in _DTYPES or w.dtype != x.dtype:
        return False
    if w.shape[0] > MAX_EXPERTS:
        return False
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
        return False
    vec = 16 // x.element_size()
    return not (w.stride(-1) != 1 or w.stride(0) % vec or w.stride(1) % vec or w.data_ptr() % 16 or x.shape[1] % vec)


def grouped_gemv(
    x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, counts: torch.Tensor, rows_per_pass_: int = 2
) -> torch.Tensor:
    """y [rows, out] = each expert's rows of x [rows, in] times its w [E, out, in] transposed.
    offsets [E + 1] and counts [E] as dispatch gives them (int32, on x's GPU; other integer
    dtypes are converted). rows_per_pass_: 1, 2 or 4 (rows_per_pass() picks one)."""
    from ._ext import ext

    ext()  # registers torch.ops.moe_a2a
    if x.stride(-1) != 1 or x.data_ptr() % 16 or x.stride(0) % (16 // x.element_size()):
        x = x.contiguous()
    return torch.ops.moe_a2a.grouped_gemv(x, w, offsets.to(torch.int32), counts.to(torch.int32), rows_per_pass_)
