"""The fake grouped GEMM of the challenge (expert output = tokens * (1 + owner rank)),
applied only to the valid rows of each expert segment, on the device, with no host sync.

Dispatch outputs have fixed maximum shapes (the worst-case capacity) and counts that stay on
the device. Scaling the whole buffer would charge every system for capacity it does not use,
so a small persistent Triton kernel reads the counts and touches only valid rows: a fixed grid
of a few programs per SM loops over the (segment, row block) work items that exist this call,
so neither the grid nor the loop grows with the capacity (a segments x capacity grid added
80-355 us to the packed pipeline). Graph-capturable: the grid size depends only on the device
and the buffer shape. Without Triton the torch fallback builds a row mask and rewrites the
whole buffer: correct, but it costs bytes proportional to the capacity, which the report notes.
"""

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only or ROCm images without triton
    triton = None

BLOCK_R, BLOCK_H = 4, 1024
PROGRAMS_PER_SM = 4


if triton is not None:

    @triton.jit
    def _scale_work(
        src,
        dst,
        seg_start,
        seg_count,
        nseg,
        factor,
        H: tl.constexpr,
        NSEG: tl.constexpr,
        BLOCK_R: tl.constexpr,
        BLOCK_H: tl.constexpr,
    ):
        # Work item w = (segment s, row block j of s), numbered segment after segment: segment s
        # owns items [ends[s] - blocks[s], ends[s]). Program p takes items p, p + P, p + 2P, ...
        segs = tl.arange(0, NSEG)
        in_range = segs < nseg
        counts = tl.load(seg_count + segs, mask=in_range, other=0).to(tl.int32)
        blocks = (counts + BLOCK_R - 1) // BLOCK_R
        ends = tl.cumsum(blocks, axis=0)  # inclusive
        total = tl.sum(blocks, axis=0)
        w = tl.program_id(0)
        while w < total:  # (a while loop: the Triton interpreter of the CPU tests takes it too)
            seg = tl.sum((ends <= w).to(tl.int32), axis=0)  # first segment with end > w
            first = tl.sum(tl.where(segs == seg, ends - blocks, 0), axis=0)
            n = tl.sum(tl.where(segs == seg, counts, 0), axis=0)
            start = tl.load(seg_start + seg).to(tl.int64)
            rows = (w - first) * BLOCK_R + tl.arange(0, BLOCK_R)
            base = (start + rows.to(tl.int64)) * H
            for h0 in range(0, H, BLOCK_H):
                cols = h0 + tl.arange(0, BLOCK_H)
                m = (rows < n)[:, None] & (cols < H)[None, :]
                off = base[:, None] + cols[None, :]
                v = tl.load(src + off, mask=m)
                # fp32 product rounded once to the token dtype, as torch's x * int does
                tl.store(dst + off, (v.to(tl.float32) * factor).to(v.dtype), mask=m)
            w += tl.num_programs(0)


def backend(device):
    return "triton" if (triton is not None and device.type == "cuda") else "torch-mask"


_SMS = {}


def _programs(device, rows):
    """Grid of the persistent kernel: PROGRAMS_PER_SM per SM, never more than row blocks."""
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        if idx not in _SMS:
            _SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
        sms = _SMS[idx]
    else:  # the Triton interpreter on the CPU (tests)
        sms = 2
    return max(1, min(PROGRAMS_PER_SM * sms, triton.cdiv(rows, BLOCK_R)))


def scale_segments(src, dst, seg_start, seg_count, factor):
    """dst[r] = src[r] * factor for every row r in [seg_start[i], seg_start[i] + seg_count[i]).

    src, dst: contiguous [R, H] views (may be the same tensor). seg_start, seg_count: device
    int tensors of one length, starts ascending, segments disjoint and inside the R rows.
    Rows outside the segments are left untouched by the Triton path (the torch fallback
    rewrites them with their own value)."""
    assert src.is_contiguous() and dst.is_contiguous() and src.shape == dst.shape
    rows, hidden = src.shape
    nseg = seg_start.numel()
    if nseg == 0 or rows == 0:
        return dst
    if backend(src.device) == "triton":
        _scale_work[(_programs(src.device, rows),)](
            src,
            dst,
            seg_start,
            seg_count,
            nseg,
            float(factor),
            H=hidden,
            NSEG=triton.next_power_of_2(nseg),
            BLOCK_R=BLOCK_R,
            BLOCK_H=BLOCK_H,
        )
        return dst
    # Fallback: row -> segment by binary search over the (ascending) starts.
    r = torch.arange(rows, device=src.device)
    starts = seg_start.long()
    seg = torch.searchsorted(starts, r, right=True) - 1
    segc = seg.clamp(min=0)
    valid = (seg >= 0) & (r - starts[segc] < seg_count.long()[segc])
    scale = torch.where(valid, float(factor), 1.0).to(src.dtype)
    torch.mul(src, scale[:, None], out=dst)
    return dst


def scale_experts(expert_x, expert_num_tokens, factor, out=None):
    """Padded layout [E_local, cap, H]: the first expert_num_tokens[e] rows of expert e."""
    e, cap, h = expert_x.shape
    out = expert_x if out is None else out
    starts = torch.arange(e, device=expert_x.device, dtype=torch.int64) * cap
    scale_segments(expert_x.view(e * cap, h), out.view(e * cap, h), starts, expert_num_tokens, factor)
    return out


def scale_packed(expert_x, expert_offsets, expert_num_tokens, factor, out=None):
    """Packed layout [capacity, H]: expert e's rows from expert_offsets[e], expert_num_tokens[e]
    of them (expert_offsets has E_local + 1 entries)."""
    out = expert_x if out is None else out
    scale_segments(expert_x, out, expert_offsets[:-1], expert_num_tokens, factor)
    return out
