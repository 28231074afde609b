"""The local experts' linear layers at a few rows an expert: moe_a2a's `grouped_gemv` op.

A decode step feeds each MoE layer a token or a few a rank, so each local expert gets one or
two rows. torch._grouped_mm then runs tiles that are almost all padding, and its time is about
twice what reading the active experts' weights once takes (a decode step's MoE layer is that
read). `grouped_gemv` streams each active expert's weights once a pass of a few rows and
computes the dot products in fp32 (csrc/experts/grouped_gemv.cu).

    y = grouped_gemv(x, w, offsets, counts)     # w [E, out, in], contiguous along in or out

y[r] = x[r] @ w[e].T for every row r of expert e (rows offsets[e] .. offsets[e] + counts[e] - 1,
dispatch's packed layout); rows of no expert are undefined, as torch._grouped_mm leaves them.
With swiglu=True, w's columns are gate then up (transformers' concatenated gate_up_proj) and y
is [rows, out / 2] = silu(gate) * up, rounded as that chain over the unfused output rounds it,
in one kernel. y is a fresh tensor. No autograd: `applies()` says where the transformers
integration uses it (no gradient asked for, few rows an expert, a layout it reads), and
MOE_A2A_GROUPED_GEMV=0 turns that off (a diagnostic switch: one build timed both ways).
"""

import os

import torch

__all__ = ["ROWS_PER_EXPERT_LIMIT", "applies", "grouped_gemv", "rows_per_pass"]

# applies() takes the small-rows kernel where the local experts get at most this many rows each
# on average, when every rank feeds the AllToAll its max_num_tokens. On one H200
# (benchmarks/bench_experts.py, docs/results/2026-11-28-h200-session35/, call 3) it took less time
# than torch._grouped_mm at every size up to 4 rows an expert, in both weight layouts: 30-44% less
# up to 2 rows an expert, 6-7% at 4. More rows were not measured.
ROWS_PER_EXPERT_LIMIT = 4.0
MAX_EXPERTS = 65535  # kGemvMaxExperts (csrc/experts/grouped_gemv.h): one call's most local experts
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# Below this many rows an expert on average nearly every active expert has one row, and the 1-row
# kernel (fewer registers: twice the blocks an SM) took 5-12% less than the automatic mode
# (DeepSeek-V3 at world 2, one token a rank: 0.0625). At 0.125 the two were within 4% either way;
# at 0.25 the 1-row kernel was 3-7% faster on bench_hf_model's model and 6-21% slower on
# DeepSeek-V3's shapes, and from 0.5 on it was slower everywhere (same call).
ONE_ROW_BELOW = 0.1


def rows_per_pass(rows_per_expert: float) -> int:
    """grouped_gemv's rows_per_pass where the experts get `rows_per_expert` rows each on average:
    1 below ONE_ROW_BELOW, else 0 (automatic)."""
    return 1 if rows_per_expert < ONE_ROW_BELOW else 0


def applies(x: torch.Tensor, w: torch.Tensor, rows_per_expert: float, swiglu: bool = False) -> bool:
    """Whether grouped_gemv serves x [rows, in] @ w [E, out, in]^T where the experts get
    `rows_per_expert` rows each on average: a GPU, one of its dtypes, w contiguous along `in`
    (nn.Linear's layout per expert) or along `out` (the transpose of [E, in, out]) and 16-byte
    aligned, at most MAX_EXPERTS experts and ROWS_PER_EXPERT_LIMIT rows an expert, no
    gradient asked for, and MOE_A2A_GROUPED_GEMV not 0. swiglu=True: with the SwiGLU fused,
    which takes w contiguous along `in` and an even `out`."""
    if os.environ.get("MOE_A2A_GROUPED_GEMV", "1") == "0" or rows_per_expert > ROWS_PER_EXPERT_LIMIT:
        return False
    if x.device.type != "cuda" or x.dim() != 2 or w.dim() != 3 or x.dtype not in _DTYPES or w.dtype != x.dtype:
        return False
    if w.shape[0] > MAX_EXPERTS:
        return False
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
        return False
    vec = 16 // x.element_size()
    in_contiguous = w.stride(2) == 1 and w.stride(1) % vec == 0
    out_contiguous = w.stride(1) == 1 and w.stride(2) % vec == 0 and w.shape[1] % vec == 0
    aligned = w.stride(0) % vec == 0 and w.data_ptr() % 16 == 0 and w.shape[2] % vec == 0
    if swiglu:
        return in_contiguous and aligned and w.shape[1] % 2 == 0
    return (in_contiguous or out_contiguous) and aligned


def grouped_gemv(
    x: torch.Tensor,
    w: torch.Tensor,
    offsets: torch.Tensor,
    counts: torch.Tensor,
    rows_per_pass: int = 0,
    swiglu: bool = False,
) -> torch.Tensor:
    """y [rows, out] = each expert's rows of x [rows, in] times its w [E, out, in] transposed.
    offsets [E + 1] and counts [E] as dispatch gives them (int32, on x's GPU; other integer
    dtypes are converted). rows_per_pass: 0 (automatic, the fastest measured: along in, each pass
    takes an expert's remaining rows in the narrowest of 4, 2 or 1; along out, 4 a pass), or 1, 2
    or 4 rows a pass for every expert (tests and bench_experts.py). swiglu=True (w contiguous
    along in, out even): y [rows, out / 2] = silu(gate) * up of the gate columns [0, out / 2) and
    the up columns [out / 2, out), each rounded to x's dtype as act_fn(gate) * up over the
    unfused y would be."""
    from ._ext import ext

    ext()  # registers torch.ops.moe_a2a
    if x.stride(-1) != 1 or x.data_ptr() % 16 or x.stride(0) % (16 // x.element_size()):
        x = x.contiguous()
    return torch.ops.moe_a2a.grouped_gemv(x, w, offsets.to(torch.int32), counts.to(torch.int32), rows_per_pass, swiglu)
