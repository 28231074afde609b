"""The fake grouped GEMM of the challenge (expert output = tokens * (1 + owner rank)),
applied only to the valid rows of each expert segment, on the device, with no host sync.

Dispatch outputs have fixed maximum shapes (capacity rows per expert) and counts that stay on
the device. Scaling the whole padded tensor would charge every system for capacity it does
not use, so a small Triton kernel reads the counts and touches only valid rows. Without
Triton the torch fallback builds a row mask and rewrites the whole buffer: correct, but it
costs bytes proportional to the capacity, which the report then notes.
"""
import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only or ROCm images without triton
    triton = None

BLOCK_R, BLOCK_H = 4, 1024


if triton is not None:
    @triton.jit
    def _scale_segment_rows(src, dst, seg_start, seg_count, factor, H: tl.constexpr,
                            BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr):
        # Grid (segments, max_rows / BLOCK_R): right when every segment may hold max_rows rows
        # (the padded layout); programs past their segment's count do nothing.
        seg = tl.program_id(0)
        r0 = tl.program_id(1) * BLOCK_R
        n = tl.load(seg_count + seg).to(tl.int64)
        if r0 < n:
            start = tl.load(seg_start + seg).to(tl.int64)
            rows = r0 + tl.arange(0, BLOCK_R)
            base = (start + rows) * H
            for h0 in range(0, H, BLOCK_H):
                cols = h0 + tl.arange(0, BLOCK_H)
                m = (rows < n)[:, None] & (cols < H)[None, :]
                off = base[:, None] + cols[None, :]
                v = tl.load(src + off, mask=m)
                # fp32 product rounded once to the token dtype, as torch's x * int does
                tl.store(dst + off, (v.to(tl.float32) * factor).to(v.dtype), mask=m)

    @triton.jit
    def _scale_rows(src, dst, seg_start, seg_count, nseg, factor, H: tl.constexpr, NSEG: tl.constexpr,
                    BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr):
        # Program p takes rows [p * BLOCK_R, + BLOCK_R) of the whole buffer and finds each row's
        # segment among the (ascending) starts, so the grid is rows / BLOCK_R whatever the number
        # of segments; programs past the last segment's end do nothing.
        segs = tl.arange(0, NSEG)
        in_range = segs < nseg
        starts = tl.load(seg_start + segs, mask=in_range, other=0).to(tl.int64)
        counts = tl.load(seg_count + segs, mask=in_range, other=0).to(tl.int64)
        end_all = tl.max(tl.where(in_range, starts + counts, 0), axis=0)
        r0 = tl.program_id(0).to(tl.int64) * BLOCK_R
        if r0 < end_all:
            rows = r0 + tl.arange(0, BLOCK_R)
            after = (starts[None, :] <= rows[:, None]) & in_range[None, :]     # [BLOCK_R, NSEG]
            seg = tl.sum(after.to(tl.int32), axis=1) - 1                       # last start <= row
            hit = segs[None, :] == seg[:, None]
            start = tl.sum(tl.where(hit, starts[None, :], 0), axis=1)
            count = tl.sum(tl.where(hit, counts[None, :], 0), axis=1)
            valid = (seg >= 0) & (rows - start < count)
            if tl.max(valid.to(tl.int32), axis=0) > 0:  # padding between segments: nothing to do
                base = rows * H
                for h0 in range(0, H, BLOCK_H):
                    cols = h0 + tl.arange(0, BLOCK_H)
                    m = valid[:, None] & (cols < H)[None, :]
                    off = base[:, None] + cols[None, :]
                    v = tl.load(src + off, mask=m)
                    # fp32 product rounded once to the token dtype, as torch's x * int does
                    tl.store(dst + off, (v.to(tl.float32) * factor).to(v.dtype), mask=m)


def backend(device):
    return "triton" if (triton is not None and device.type == "cuda") else "torch-mask"


def scale_segments(src, dst, seg_start, seg_count, max_rows, factor):
    """dst[r] = src[r] * factor for every row r in [seg_start[i], seg_start[i] + seg_count[i]).

    src, dst: contiguous [R, H] views (may be the same tensor). seg_start, seg_count: device
    int tensors of one length, starts ascending; max_rows bounds every seg_count. The Triton
    grid is segments x max_rows when that tiles the buffer (padded), else one program per row
    block of the buffer (packed, where max_rows is the whole capacity: a segments x capacity grid
    added 80-355 us to the pipeline). Rows outside the segments are left untouched."""
    assert src.is_contiguous() and dst.is_contiguous() and src.shape == dst.shape
    rows, hidden = src.shape
    nseg = seg_start.numel()
    if nseg == 0 or rows == 0:
        return dst
    if backend(src.device) == "triton":
        per_segment = nseg * triton.cdiv(max(max_rows, 1), BLOCK_R)
        if per_segment <= 2 * triton.cdiv(rows, BLOCK_R):  # padded: segments tile the buffer
            _scale_segment_rows[(nseg, triton.cdiv(max(max_rows, 1), BLOCK_R))](
                src, dst, seg_start, seg_count, float(factor), H=hidden, BLOCK_R=BLOCK_R, BLOCK_H=BLOCK_H)
        else:  # packed: each segment may hold every row; one program per row block instead
            _scale_rows[(triton.cdiv(rows, BLOCK_R),)](src, dst, seg_start, seg_count, nseg, float(factor),
                                                      H=hidden, NSEG=triton.next_power_of_2(nseg),
                                                      BLOCK_R=BLOCK_R, BLOCK_H=BLOCK_H)
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
    """[E_local, cap, H] layout: the first expert_num_tokens[e] rows of expert e."""
    e, cap, h = expert_x.shape
    out = expert_x if out is None else out
    starts = torch.arange(e, device=expert_x.device, dtype=torch.int64) * cap
    scale_segments(expert_x.view(e * cap, h), out.view(e * cap, h), starts,
                   expert_num_tokens, cap, factor)
    return out
