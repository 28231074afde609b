"""fp8 dispatch (issue 13): every delivered row's fp8 bytes and scales equal
moe_a2a.reference.quantize_fp8 of its source token exactly, in both formats and layouts, with
quantization inside dispatch or by the caller; special values stay in their block; combine after
an fp8 dispatch; what is refused and how."""

import pytest
import torch
import torch.distributed as dist
from all_to_all_checks import assert_reports_lead_to, check_fp8_rows, delivered_rows, experts_for, fits

import moe_a2a
from moe_a2a import reference as ref

FORMATS = [torch.float8_e4m3fn, torch.float8_e4m3fnuz]
FORMAT_IDS = ["e4m3fn", "e4m3fnuz"]
# The challenge's benchmark shapes, at few tokens (the bytes are checked one row at a time).
SHAPES = [(8, 2, 6144, 16), (64, 6, 2048, 32), (128, 4, 2880, 24), (256, 8, 7168, 8)]


@pytest.mark.parametrize("layout", ["padded", "packed"])
@pytest.mark.parametrize("fp8_dtype", FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "E{}K{}H{}T{}".format(*s))
def test_fp8_rows_equal_the_reference(shape, fp8_dtype, layout, world, rank):
    E, K, H, T = shape
    if not fits(E, world):
        pytest.skip(f"{E} experts cannot be split over {world} ranks")
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, layout=layout, dispatch_dtype=fp8_dtype) as ep:
        for seed in (1, 2):
            inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=seed)
            x, idx, w = (t.cuda() for t in inputs[rank])
            d = ep.dispatch(x, idx, w)
            ep.synchronize()
            check_fp8_rows(d, inputs, rank, world, E, fp8_dtype, what=f"seed {seed}: ")
            ep.combine(torch.zeros(d.expert_x.shape, dtype=torch.bfloat16, device="cuda"), d)
        ep.synchronize()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_fp8_from_other_token_types_and_pow2_scales(dtype, world, rank):
    E, K, H, T = experts_for(16, world), 4, 2880, 32  # a short last block: 2880 = 22 x 128 + 64
    for pow2 in (False, True):
        with moe_a2a.AllToAll(
            dist.group.WORLD, E, K, H, T, dtype, dispatch_dtype=torch.float8_e4m3fn, fp8_pow2_scales=pow2
        ) as ep:
            inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=5)
            d = ep.dispatch(*(t.cuda() for t in inputs[rank]))
            ep.synchronize()
            check_fp8_rows(d, inputs, rank, world, E, torch.float8_e4m3fn, pow2=pow2, what=f"pow2={pow2}: ")
            if pow2:
                for _, scales, _ in delivered_rows(d):
                    mantissa, _ = torch.frexp(scales)
                    assert torch.all(mantissa == 0.5), "pow2 scales are not powers of two"


def special_inputs(world, E, K, H, T, seed):
    """Rows that probe the edges: zeros, a NaN, an inf, values at the format's max and far
    above it, tiny values; the rest normal."""
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=seed, num_tokens=T)
    out = []
    for r, (x, idx, w) in enumerate(inputs):
        x = x.clone()
        x[0] = 0
        x[1, 3] = float("nan")
        x[2, 200] = float("inf")
        x[3] = 448.0
        x[4, :128] = 3.0e38  # bf16 max is about 3.39e38
        x[5] = 1e-35
        x[6, ::2] = -x[6, ::2] * 1e4
        out.append(ref.Routing(x, idx, w))
    return out


@pytest.mark.parametrize("fp8_dtype", FORMATS, ids=FORMAT_IDS)
def test_fp8_special_values_stay_in_their_block(fp8_dtype, world, rank):
    E, K, H, T = experts_for(8, world), 2, 512, 8
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, dispatch_dtype=fp8_dtype) as ep:
        inputs = special_inputs(world, E, K, H, T, seed=9)
        d = ep.dispatch(*(t.cuda() for t in inputs[rank]))
        ep.synchronize()
        check_fp8_rows(d, inputs, rank, world, E, fp8_dtype)
        # What that means for the values: NaN only in the poisoned blocks of tokens 1 and 2.
        for x, s, meta in delivered_rows(d):
            values = ref.dequantize_fp8(x.cpu(), s.cpu())
            for i, (src, tok, _) in enumerate(meta.tolist()):
                nan_blocks = values[i].isnan().unflatten(0, (H // 128, 128)).any(1).nonzero().flatten().tolist()
                want = {1: [0], 2: [1]}.get(tok, [])
                assert nan_blocks == want, f"token {tok} of rank {src}: NaN in blocks {nan_blocks}, expected {want}"


@pytest.mark.parametrize("fp8_format", FORMAT_IDS)
def test_fp8_device_arithmetic_equals_the_definition_on_every_float(fp8_format):
    """dispatch's device encoder and block maximum (csrc/ep/fp8_rows.cuh: hardware instructions where
    they give the same bytes) equal fp8.h's software definition, which quantize_fp8 mirrors, on all
    2^32 fp32 bit patterns (a NaN's sign and payload aside). One GPU per rank, no collective."""
    from moe_a2a import _C

    encode_bad, first_encode, amax_bad, first_amax = _C.fp8_device_check(fp8_format, torch.cuda.current_device())
    assert encode_bad == 0, (
        f"{fp8_format}: {encode_bad} fp32 patterns encode differently, the first 0x{first_encode:08x}"
    )
    assert amax_bad == 0, f"{amax_bad} (maximum, pattern) folds differ, the first pattern 0x{first_amax:08x}"


@pytest.mark.parametrize(
    "dtype, fp8_dtype, pow2, send_sms, alignment, T",
    [
        (torch.bfloat16, torch.float8_e4m3fn, False, "auto", 1, 1024),
        (torch.bfloat16, torch.float8_e4m3fnuz, False, "auto", 8, 1024),
        (torch.bfloat16, torch.float8_e4m3fn, False, "7,auto", 1, 1024),  # 7 quantizing senders, many groups each
        (torch.float16, torch.float8_e4m3fn, False, "auto", 1, 1024),
        (torch.float32, torch.float8_e4m3fn, True, "auto", 1, 1024),
        (torch.bfloat16, torch.float8_e4m3fn, False, "auto", 1, 2304),  # twice the groups up to 144 SMs
    ],
    ids=["bf16-e4m3fn", "bf16-e4m3fnuz-aligned", "bf16-e4m3fn-7-senders", "fp16-e4m3fn", "fp32-e4m3fn-pow2", "doubled"],
)
def test_fp8_rows_at_a_large_batch(dtype, fp8_dtype, pow2, send_sms, alignment, T, world, rank):
    """A batch past kSplitDispatchTokens, where a quantizing dispatch picks its blocks' roles its
    own way (EpConfig::dispatch_sender_blocks; also a fixed split, 7 senders with many groups
    each), and with every block on both halves places this rank's own rows itself (own_placed in
    csrc/ep/dispatch.cu): every delivered row's bytes and scales equal the reference's, from each
    token type (a short last block: 2880 = 22 x 128 + 64), with every rank at 1024 tokens and with
    counts that differ by rank (one side of kOwnRowsDirectTokens each), a masked slot on every
    rank; and combine of identity experts on the dequantized rows (the route of own rows too).
    At 2304 tokens, on up to 144 SMs, both ranks double their groups (EpConfig::num_groups: one
    group a block would hold more than DOUBLE_GROUPS_TOKENS)."""
    E, K, H = experts_for(16, world), 4, 2880
    with moe_a2a.AllToAll(
        dist.group.WORLD,
        E,
        K,
        H,
        T,
        dtype,
        layout="packed",
        dispatch_dtype=fp8_dtype,
        fp8_pow2_scales=pow2,
        send_sms=send_sms,
        expert_alignment=alignment,
    ) as ep:
        for seed, num_tokens in ((21, [T] * world), (22, [T - 40 * (r % 2) for r in range(world)])):
            inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=seed, num_tokens=num_tokens)
            inputs = [ref.Routing(x, idx.clone(), w) for x, idx, w in inputs]
            for r, (_, idx, _) in enumerate(inputs):
                idx[5 + r, 2] = ref.MASKED_SLOT
            d = ep.dispatch(*(t.cuda() for t in inputs[rank]))
            ep.synchronize()
            check_fp8_rows(d, inputs, rank, world, E, fp8_dtype, pow2=pow2, what=f"tokens {num_tokens}: ")
            rows_x, rows_s = d.expert_x.reshape(-1, H), d.expert_x_scale.reshape(-1, d.expert_x_scale.shape[-1])
            y = ref.dequantize_fp8(rows_x, rows_s, dtype).reshape(d.expert_x.shape)
            out = ep.combine(y, d)
            ep.synchronize()
            mine = inputs[rank]
            tokens = ref.dequantize_fp8(*ref.quantize_fp8(mine.x, fp8_dtype, pow2), dtype).float()
            wsum = torch.where(mine.topk_idx == ref.MASKED_SLOT, 0.0, mine.topk_weights).sum(1, keepdim=True)
            torch.testing.assert_close(
                out.float().cpu(), tokens * wsum, rtol=2e-2, atol=2e-2, msg=lambda m: f"tokens {num_tokens}: {m}"
            )
        ep.synchronize()


def test_fp8_bad_expert_id_at_a_large_batch(world, rank):
    """At 1024 tokens a quantizing dispatch's sending blocks reserve their pairs' ranks, and the last
    to do so sends the counts (reserve_pairs in csrc/ep/dispatch_send.cuh): a bad id on rank 0 is
    raised there and as a peer's error everywhere else, nothing is written outside the buffers, and
    the next round, whose totals must start from 0 again, delivers the reference's rows."""
    E, K, H, T = experts_for(16, world), 4, 2048, 1024
    canary = moe_a2a.SymmetricHeap(dist.group.WORLD, 1 << 20)
    guard = canary.alloc((1 << 18,), torch.int32)
    guard.fill_(0x5A5A5A5A)
    try:
        with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, dispatch_dtype=torch.float8_e4m3fn) as ep:
            inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=23, num_tokens=T)
            x, idx, w = (t.cuda() for t in inputs[rank])
            if rank == 0:
                idx = idx.clone()
                idx[T - 3, 1] = E  # a bad id in the last token group
            d = ep.dispatch(x, idx, w)
            ep.combine(torch.zeros(d.expert_x.shape, dtype=torch.bfloat16, device="cuda"), d)
            with pytest.raises(RuntimeError) as raised:
                ep.synchronize()
            assert_reports_lead_to(str(raised.value), 0, "expert id", world)
            for seed in (24, 25):  # two clean rounds: each starts from totals the round before cleared
                inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=seed, num_tokens=T)
                d = ep.dispatch(*(t.cuda() for t in inputs[rank]))
                ep.synchronize()
                check_fp8_rows(d, inputs, rank, world, E, torch.float8_e4m3fn, what=f"seed {seed}: ")
                scales = d.expert_x_scale.reshape(-1, d.expert_x_scale.shape[-1])
                y = ref.dequantize_fp8(d.expert_x.reshape(-1, H), scales, torch.bfloat16)
                ep.combine(y.reshape(d.expert_x.shape), d)
                ep.synchronize()
        torch.cuda.synchronize()
        assert bool((guard == 0x5A5A5A5A).all()), "a bad id wrote outside the all-to-all's buffers"
    finally:
        canary.close()


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_fp8_given_by_the_caller(layout, world, rank):
    """x already fp8 with its scales: sent as given (here the reference's, so the rows must equal
    what dispatch's own quantization delivers), also through the split calls."""
    E, K, H, T = experts_for(32, world), 4, 2048, 16
    with moe_a2a.AllToAll(
        dist.group.WORLD, E, K, H, T, torch.bfloat16, layout=layout, dispatch_dtype=torch.float8_e4m3fnuz
    ) as ep:
        inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=3)
        x, idx, w = (t.cuda() for t in inputs[rank])
        q, s = ref.quantize_fp8(inputs[rank].x, torch.float8_e4m3fnuz)
        for split in (False, True):
            if split:
                d = ep.dispatch_recv(ep.dispatch_send(q.cuda(), idx, w, x_scale=s.cuda()))
            else:
                d = ep.dispatch(q.cuda(), idx, w, x_scale=s.cuda())
            ep.synchronize()
            check_fp8_rows(d, inputs, rank, world, E, torch.float8_e4m3fnuz, what=f"split={split}: ")
            ep.combine(torch.zeros(d.expert_x.shape, dtype=torch.bfloat16, device="cuda"), d)
        ep.synchronize()


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_fp8_masked_slots_aligned_and_combined(layout, world, rank):
    """Unused slots, alignment padding (zero rows and zero scales) and a combine of experts that
    compute on the dequantized rows, against the reference on the dequantized tokens."""
    E, K, H, T = experts_for(16, world), 4, 1024, 32
    alignment = 8 if layout == "packed" else 1
    fp8 = torch.float8_e4m3fn
    with moe_a2a.AllToAll(
        dist.group.WORLD, E, K, H, T, torch.bfloat16, layout=layout, dispatch_dtype=fp8, expert_alignment=alignment
    ) as ep:
        inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=11)
        g = torch.Generator().manual_seed(12)
        masked = []
        for x, idx, w in inputs:
            drop = torch.rand(idx.shape, generator=g) < 0.4
            drop[0] = True  # one token with every slot unused
            masked.append(ref.Routing(x, idx.masked_fill(drop, ref.MASKED_SLOT), w))
        x, idx, w = (t.cuda() for t in masked[rank])
        d = ep.dispatch(x, idx, w)
        ep.synchronize()
        check_fp8_rows(d, masked, rank, world, E, fp8)
        offsets, counts = d.expert_offsets.tolist(), d.expert_num_tokens.tolist()
        if layout == "packed":
            for e in range(len(counts)):
                assert offsets[e] % alignment == 0
                pad = slice(offsets[e] + counts[e], offsets[e + 1])
                assert torch.all(d.expert_x[pad].view(torch.uint8) == 0) and torch.all(d.expert_x_scale[pad] == 0)
        # Identity experts on the dequantized rows: combine must give sum_k w * dequant(x).
        rows_x, rows_s = d.expert_x.reshape(-1, H), d.expert_x_scale.reshape(-1, d.expert_x_scale.shape[-1])
        y = ref.dequantize_fp8(rows_x, rows_s, torch.bfloat16).reshape(d.expert_x.shape)
        out = ep.combine(y, d)
        ep.synchronize()
        tokens = ref.dequantize_fp8(*ref.quantize_fp8(masked[rank].x, fp8), torch.bfloat16).float()
        unused = masked[rank].topk_idx == ref.MASKED_SLOT
        wsum = torch.where(unused, 0.0, masked[rank].topk_weights).sum(1, keepdim=True)
        torch.testing.assert_close(out.float().cpu(), tokens * wsum, rtol=2e-2, atol=2e-2)


def test_fp8_refusals(world, rank):
    E, K, H, T = experts_for(8, world), 2, 1024, 8
    with pytest.raises(ValueError, match="multiple of 16"):
        moe_a2a.AllToAll(dist.group.WORLD, E, K, 1032, T, torch.bfloat16, dispatch_dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="dispatch_dtype"):
        moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, dispatch_dtype=torch.float16)
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.bfloat16, seed=4, num_tokens=T)
    x, idx, w = (t.cuda() for t in inputs[rank])
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16, dispatch_dtype=torch.float8_e4m3fn) as ep:
        with pytest.raises(RuntimeError, match="forward-only"):
            ep.dispatch(x.clone().requires_grad_(), idx, w)
        q, s = ref.quantize_fp8(inputs[rank].x, torch.float8_e4m3fnuz)  # the other format
        with pytest.raises(RuntimeError, match="(?i)float8_e4m3fn, got"):
            ep.dispatch(q.cuda(), idx, w, x_scale=s.cuda())
        with pytest.raises(RuntimeError, match="x_scale must be"):
            ep.dispatch(q.cuda().view(torch.float8_e4m3fn), idx, w, x_scale=s[:, :3].cuda().contiguous())
        d = ep.dispatch(x, idx, w)  # still usable: the refusals happened before any launch
        ep.combine(torch.zeros(d.expert_x.shape, dtype=torch.bfloat16, device="cuda"), d)
        ep.synchronize()
    with moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16) as ep:
        with pytest.raises(RuntimeError, match="x_scale is for"):
            ep.dispatch(x, idx, w, x_scale=torch.ones(T, H // 128, device="cuda"))
        d = ep.dispatch(x, idx, w)
        assert d.expert_x_scale is None
        ep.combine(d.expert_x, d)
        ep.synchronize()
