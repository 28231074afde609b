"""The pure-torch reference against its loop spelling, hand-computed examples, and the
helper that canonicalises the library's padded dispatch layout. CPU only."""

import pytest
import torch

from moe_a2a import reference as ref

# (world, num_experts, topk, hidden, max_num_tokens, dtype, index_dtype, num_tokens)
SHAPES = [
    (2, 8, 2, 64, 16, torch.float16, torch.int32, None),
    (2, 4, 1, 32, 8, torch.bfloat16, torch.int64, None),  # topk = 1
    (3, 6, 3, 16, 10, torch.float16, torch.int64, [5, 0, 7]),  # one rank sends nothing
    (4, 16, 4, 2880, 6, torch.bfloat16, torch.int32, None),  # hidden 2880 (odd vector tail)
    (8, 64, 6, 128, 8, torch.float16, torch.int32, [3, 0, 1, 8, 2, 5, 4, 6]),
    (1, 4, 2, 8, 5, torch.float16, torch.int32, None),  # single rank: everything local
]
SHAPE_IDS = [f"w{s[0]}-e{s[1]}-k{s[2]}-h{s[3]}-{str(s[5])[6:]}-{str(s[6])[6:]}" for s in SHAPES]


def make_inputs(shape, seed=1234):
    world, E, K, H, max_t, dtype, idt, nt = shape
    return ref.generate_all_inputs(world, E, K, H, max_t, dtype=dtype, seed=seed, num_tokens=nt, index_dtype=idt)


def bits_equal(a, b):
    """Bitwise equality (torch.equal would call -0.0 == 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(view), b.contiguous().view(view))


# --------------------------------------------------------------------------- ownership


def test_owner_and_local_expert():
    assert ref.owner_rank(0, 64, 8) == 0
    assert ref.owner_rank(7, 64, 8) == 0
    assert ref.owner_rank(8, 64, 8) == 1
    assert ref.owner_rank(63, 64, 8) == 7
    assert ref.local_expert(63, 64, 8) == 7
    assert ref.local_expert(9, 64, 8) == 1
    e = torch.tensor([0, 3, 4, 11], dtype=torch.int32)
    assert ref.owner_rank(e, 12, 3).tolist() == [0, 0, 1, 2]
    assert ref.local_expert(e, 12, 3).tolist() == [0, 3, 0, 3]
    with pytest.raises(ValueError):
        ref.owner_rank(0, 10, 4)  # 10 experts cannot be split over 4 ranks


# --------------------------------------------------------------------------- inputs


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_generated_inputs_are_valid(shape):
    world, E, K, H, max_t, dtype, idt, nt = shape
    inputs = make_inputs(shape)
    assert len(inputs) == world
    for r, (x, idx, w) in enumerate(inputs):
        T = x.shape[0]
        if nt is not None:
            assert T == nt[r]
        else:
            assert 1 <= T <= max_t
        assert x.shape == (T, H) and x.dtype == dtype
        assert idx.shape == (T, K) and idx.dtype == idt
        assert w.shape == (T, K) and w.dtype == torch.float32
        assert torch.isfinite(x.float()).all()
        if T:
            assert int(idx.min()) >= 0 and int(idx.max()) < E
            # distinct experts per token
            assert (idx.sort(dim=1).values.diff(dim=1) > 0).all()
            assert (w > 0).all()
            torch.testing.assert_close(w.sum(dim=1), torch.ones(T), rtol=0, atol=1e-5)


def test_generation_is_deterministic_per_seed_and_rank():
    a = ref.generate_all_inputs(4, 16, 4, 32, 12, seed=7)
    b = ref.generate_all_inputs(4, 16, 4, 32, 12, seed=7)
    c = ref.generate_all_inputs(4, 16, 4, 32, 12, seed=8)
    for ra, rb in zip(a, b):
        assert all(bits_equal(u, v) for u, v in zip(ra, rb))
    # Another seed gives other data (x of the same length would differ; T almost surely too).
    assert any(ra.x.shape != rc.x.shape or not torch.equal(ra.x, rc.x) for ra, rc in zip(a, c))
    # Ranks get different streams.
    assert not (a[0].x.shape == a[1].x.shape and torch.equal(a[0].x, a[1].x))
    # Any rank can regenerate any other rank's data on its own, whatever the world size.
    for r in range(4):
        single = ref.generate_rank_inputs(r, 4, 16, 4, 32, 12, seed=7)
        assert all(bits_equal(u, v) for u, v in zip(single, a[r]))
    other_world = ref.generate_rank_inputs(1, 2, 16, 4, 32, 12, seed=7)
    assert all(bits_equal(u, v) for u, v in zip(other_world, a[1]))


def test_token_count_covers_its_range():
    counts = {ref.generate_rank_inputs(0, 1, 4, 2, 8, 3, seed=s).num_tokens for s in range(60)}
    assert counts == {1, 2, 3}


def test_generation_rejects_bad_arguments():
    with pytest.raises(ValueError):
        ref.generate_rank_inputs(0, 2, 8, 2, 16, 4, num_tokens=5)  # T > max_num_tokens
    with pytest.raises(ValueError):
        ref.generate_rank_inputs(0, 2, 8, 9, 16, 4)  # topk > num_experts
    with pytest.raises(ValueError):
        ref.generate_rank_inputs(2, 2, 8, 2, 16, 4)  # rank outside world
    with pytest.raises(ValueError):
        ref.generate_rank_inputs(0, 2, 8, 2, 16, 4, dtype=torch.float64)  # tokens are 16- or 32-bit floats


# --------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_dispatch_matches_loop(shape):
    world, E = shape[0], shape[1]
    inputs = make_inputs(shape)
    for r in range(world):
        vec = ref.dispatch_reference(inputs, r, E, world)
        loop = ref.dispatch_reference_loop(inputs, r, E, world)
        assert vec.num_local_experts == loop.num_local_experts == E // world
        for e in range(E // world):
            assert torch.equal(vec.meta[e], loop.meta[e]), (r, e)
            assert vec.meta[e].dtype == torch.int64
            assert bits_equal(vec.tokens[e], loop.tokens[e]), (r, e)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_dispatch_delivers_every_pair_once_with_its_token(shape):
    world, E, K = shape[0], shape[1], shape[2]
    epr = E // world
    inputs = make_inputs(shape)
    seen = 0
    for r in range(world):
        d = ref.dispatch_reference(inputs, r, E, world)
        for e in range(epr):
            m = d.meta[e]
            seen += m.shape[0]
            assert (m[:, 0] == r * epr + e).all()
            for (g, s, t, k), tok in zip(m.tolist(), d.tokens[e]):
                assert int(inputs[s].topk_idx[t, k]) == g
                assert torch.equal(tok, inputs[s].x[t])
            # canonical order: strictly increasing (src_rank, src_token, k)
            key = (m[:, 1] * 10_000 + m[:, 2]) * 100 + m[:, 3]
            assert (key.diff() > 0).all()
    assert seen == sum(inp.num_tokens * K for inp in inputs)


def test_dispatch_hand_example():
    # world 2, 4 experts: rank 0 owns experts 0, 1; rank 1 owns 2, 3.
    x0 = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float16)
    x1 = torch.tensor([[5.0, 6.0]], dtype=torch.float16)
    i0 = torch.tensor([[3, 0], [1, 2]], dtype=torch.int32)
    i1 = torch.tensor([[2, 0]], dtype=torch.int32)
    w0 = torch.full((2, 2), 0.5)
    w1 = torch.full((1, 2), 0.5)
    inputs = [ref.Routing(x0, i0, w0), ref.Routing(x1, i1, w1)]

    d0 = ref.dispatch_reference(inputs, 0, 4, 2)
    assert d0.meta[0].tolist() == [[0, 0, 0, 1], [0, 1, 0, 1]]
    assert d0.tokens[0].tolist() == [[1.0, 2.0], [5.0, 6.0]]
    assert d0.meta[1].tolist() == [[1, 0, 1, 0]]
    assert d0.tokens[1].tolist() == [[3.0, 4.0]]

    d1 = ref.dispatch_reference(inputs, 1, 4, 2)
    assert d1.meta[0].tolist() == [[2, 0, 1, 1], [2, 1, 0, 0]]
    assert d1.tokens[0].tolist() == [[3.0, 4.0], [5.0, 6.0]]
    assert d1.meta[1].tolist() == [[3, 0, 0, 0]]
    assert d1.num_tokens == [2, 1]


def test_dispatch_rejects_out_of_range_expert():
    inputs = ref.generate_all_inputs(2, 8, 2, 16, 4, seed=3, num_tokens=2)
    bad = ref.Routing(inputs[0].x, inputs[0].topk_idx.clone(), inputs[0].topk_weights)
    bad.topk_idx[1, 0] = 8
    with pytest.raises(ValueError):
        ref.dispatch_reference([bad, inputs[1]], 0, 8, 2)


# --------------------------------------------------------------------------- GEMM, combine


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fake_gemm(dtype):
    t = torch.randn(3, 5, 2880, generator=torch.Generator().manual_seed(0)).to(dtype)
    for rank in (0, 1, 7):
        y = ref.fake_grouped_gemm_reference(t, rank)
        assert y.dtype == dtype
        assert bits_equal(y, ref.fake_grouped_gemm_reference_loop(t, rank))
        assert bits_equal(y, (t.double() * (1 + rank)).to(dtype))  # one correct rounding
    ints = torch.tensor([[1.0, -2.0, 3.0]], dtype=dtype)
    assert ref.fake_grouped_gemm_reference([ints], 2)[0].tolist() == [[3.0, -6.0, 9.0]]


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_pipeline_equals_moe_reference_bitwise(shape):
    """dispatch -> fake GEMM -> combine reproduces moe_reference bit for bit, and the loop
    spellings agree with the vectorised ones."""
    world, E = shape[0], shape[1]
    inputs = make_inputs(shape)
    ys, metas = [], []
    for r in range(world):
        d = ref.dispatch_reference(inputs, r, E, world)
        ys.append(ref.fake_grouped_gemm_reference(d.tokens, r))
        metas.append(d.meta)
    for s in range(world):
        expected = ref.moe_reference(inputs, s, E, world)
        assert expected.shape == inputs[s].x.shape and expected.dtype == inputs[s].x.dtype
        w = inputs[s].topk_weights
        assert bits_equal(ref.combine_reference(ys, metas, s, w), expected)
        assert bits_equal(ref.combine_reference_loop(ys, metas, s, w), expected)
        assert bits_equal(ref.moe_reference_loop(inputs, s, E, world), expected)
    all_out = ref.moe_reference_all(inputs, E, world)
    assert all(bits_equal(a, ref.moe_reference(inputs, s, E, world)) for s, a in enumerate(all_out))


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_moe_reference_close_to_float64(shape):
    world, E = shape[0], shape[1]
    inputs = make_inputs(shape)
    for s, (x, idx, w) in enumerate(inputs):
        owners = idx.long() // (E // world)
        exact = (w.double()[:, :, None] * (1 + owners).double()[:, :, None] * x.double()[:, None, :]).sum(dim=1)
        got = ref.moe_reference(inputs, s, E, world)
        # The challenge's tolerance; the reference itself is far inside it.
        torch.testing.assert_close(got.double(), exact, rtol=1e-2, atol=5e-3)


def test_moe_hand_example():
    # world 2, 4 experts. token 0 -> experts 0 (rank 0, x1) and 3 (rank 1, x2);
    # token 1 -> experts 2 (x2) and 1 (x1).
    x = torch.tensor([[1.0, 2.0], [-4.0, 0.5]], dtype=torch.float16)
    idx = torch.tensor([[0, 3], [2, 1]], dtype=torch.int64)
    w = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    other = ref.Routing(
        torch.zeros(0, 2, dtype=torch.float16),
        torch.zeros(0, 2, dtype=torch.int64),
        torch.zeros(0, 2),
    )
    inputs = [ref.Routing(x, idx, w), other]
    out = ref.moe_reference(inputs, 0, 4, 2)
    # token 0: 0.25*1*x + 0.75*2*x = 1.75x; token 1: 0.5*2*x + 0.5*1*x = 1.5x
    assert out.tolist() == [[1.75, 3.5], [-6.0, 0.75]]
    assert ref.moe_reference(inputs, 1, 4, 2).shape == (0, 2)


def test_combine_rejects_missing_or_duplicated_pairs():
    shape = SHAPES[0]
    world, E = shape[0], shape[1]
    inputs = make_inputs(shape)
    ds = [ref.dispatch_reference(inputs, r, E, world) for r in range(world)]
    ys = [d.tokens for d in ds]
    metas = [d.meta for d in ds]
    # find an expert that holds a pair of source rank 0
    r, e = next((r, e) for r in range(world) for e in range(E // world) if (metas[r][e][:, 1] == 0).any())
    w = inputs[0].topk_weights
    dropped = [list(m) for m in metas]
    dropped_y = [list(y) for y in ys]
    assert int(metas[r][e][0, 1]) == 0  # rows are sorted by src_rank
    dropped[r][e], dropped_y[r][e] = metas[r][e][1:], ys[r][e][1:]
    with pytest.raises(ValueError):
        ref.combine_reference(dropped_y, dropped, 0, w)
    with pytest.raises(ValueError):
        ref.combine_reference_loop(dropped_y, dropped, 0, w)
    duplicated = [list(m) for m in metas]
    duplicated_y = [list(y) for y in ys]
    duplicated[r][e] = torch.cat([metas[r][e], metas[r][e][-1:]])
    duplicated_y[r][e] = torch.cat([ys[r][e], ys[r][e][-1:]])
    src = int(metas[r][e][-1, 1])
    with pytest.raises(ValueError):
        ref.combine_reference(duplicated_y, duplicated, src, inputs[src].topk_weights)
    with pytest.raises(ValueError):
        ref.combine_reference_loop(duplicated_y, duplicated, src, inputs[src].topk_weights)


# --------------------------------------------------------------------------- library layout


def to_padded_layout(d, capacity, gen, pad_value=float("nan")):
    """What the library returns for one rank: experts padded to `capacity` rows, tokens in
    an arbitrary order inside each expert, garbage in the padding, 3-column int32 meta."""
    E = d.num_local_experts
    H = d.tokens[0].shape[1]
    expert_x = torch.full((E, capacity, H), pad_value, dtype=d.tokens[0].dtype)
    expert_meta = torch.full((E, capacity, 3), -1, dtype=torch.int32)
    counts = torch.zeros(E, dtype=torch.int32)
    for e in range(E):
        n = d.num_tokens[e]
        perm = torch.randperm(n, generator=gen)
        expert_x[e, :n] = d.tokens[e][perm]
        expert_meta[e, :n] = d.meta[e][perm][:, 1:].to(torch.int32)
        counts[e] = n
    return expert_x, counts, expert_meta


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_canonical_dispatch_round_trip(shape):
    world, E = shape[0], shape[1]
    inputs = make_inputs(shape)
    gen = torch.Generator().manual_seed(99)
    for r in range(world):
        expected = ref.dispatch_reference(inputs, r, E, world)
        cap = max(expected.num_tokens) + 3
        ex, counts, meta = to_padded_layout(expected, cap, gen)
        got = ref.canonical_dispatch(ex, counts, meta, rank=r)
        assert got.meta_columns == ref.LIBRARY_META_COLUMNS
        assert got.num_tokens == expected.num_tokens
        for e in range(E // world):
            assert torch.equal(got.meta[e], expected.meta[e][:, 1:])
            assert bits_equal(got.tokens[e], expected.tokens[e])
        assert ref.dispatch_mismatch(got, expected) is None
        ref.assert_dispatch_matches(got, expected)


def test_canonical_dispatch_feeds_combine():
    """Library-layout (3-column) metadata works in combine_reference too."""
    shape = SHAPES[4]
    world, E = shape[0], shape[1]
    inputs = make_inputs(shape)
    gen = torch.Generator().manual_seed(5)
    ys, metas = [], []
    for r in range(world):
        d = ref.dispatch_reference(inputs, r, E, world)
        c = ref.canonical_dispatch(*to_padded_layout(d, max(d.num_tokens) + 1, gen))
        ys.append(ref.fake_grouped_gemm_reference(c.tokens, r))
        metas.append(c.meta)
    for s in range(world):
        out = ref.combine_reference(ys, metas, s, inputs[s].topk_weights)
        assert bits_equal(out, ref.moe_reference(inputs, s, E, world))


def test_canonical_dispatch_detects_errors():
    shape = SHAPES[0]
    world, E = shape[0], shape[1]
    inputs = make_inputs(shape, seed=4321)
    expected = ref.dispatch_reference(inputs, 1, E, world)
    e = max(range(E // world), key=lambda i: expected.num_tokens[i])
    assert expected.num_tokens[e] >= 2
    cap = max(expected.num_tokens) + 2
    gen = torch.Generator().manual_seed(0)

    # a wrong payload bit
    ex, counts, meta = to_padded_layout(expected, cap, gen)
    ex[e, 0, 3] = -ex[e, 0, 3] if ex[e, 0, 3] != 0 else 1.0
    msg = ref.dispatch_mismatch(ref.canonical_dispatch(ex, counts, meta), expected)
    assert msg is not None and "payload" in msg
    with pytest.raises(AssertionError):
        ref.assert_dispatch_matches(ref.canonical_dispatch(ex, counts, meta), expected)

    # a wrong k
    ex, counts, meta = to_padded_layout(expected, cap, gen)
    meta[e, 0, 2] += 1
    msg = ref.dispatch_mismatch(ref.canonical_dispatch(ex, counts, meta), expected)
    assert msg is not None and "src_rank, src_token, k" in msg

    # a token missing (count one short)
    ex, counts, meta = to_padded_layout(expected, cap, gen)
    counts[e] -= 1
    msg = ref.dispatch_mismatch(ref.canonical_dispatch(ex, counts, meta), expected)
    assert msg is not None and "tokens, expected" in msg

    # a count beyond the capacity is a layout error, not a silent truncation
    counts[e] = cap + 1
    with pytest.raises(ValueError):
        ref.canonical_dispatch(ex, counts, meta)
    with pytest.raises(ValueError):
        ref.canonical_dispatch(ex, counts[:-1], meta)


# --------------------------------------------------------------------------- masked slots


def mask_slots(inputs, seed=7, fraction=0.3):
    """The inputs with about `fraction` of the (token, k) slots set to -1 (unused); each rank
    keeps one token fully masked when it has tokens."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for x, idx, w in inputs:
        masked = torch.rand(idx.shape, generator=g) < fraction
        if idx.shape[0]:
            masked[0] = True
        out.append(ref.Routing(x, idx.masked_fill(masked, ref.MASKED_SLOT), w))
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_masked_slots_are_neither_dispatched_nor_combined(shape):
    world, E = shape[0], shape[1]
    inputs = mask_slots(make_inputs(shape))
    for r in range(world):
        got, loop = ref.dispatch_reference(inputs, r, E, world), ref.dispatch_reference_loop(inputs, r, E, world)
        for e in range(E // world):
            assert torch.equal(got.meta[e], loop.meta[e]) and torch.equal(got.tokens[e], loop.tokens[e]), (r, e)
        assert all(int(m[:, 0].min()) >= 0 for m in got.meta if len(m)), "a masked slot was dispatched"
        assert bits_equal(ref.moe_reference(inputs, r, E, world), ref.moe_reference_loop(inputs, r, E, world))
        x = inputs[r].x
        if x.shape[0]:
            assert torch.all(ref.moe_reference(inputs, r, E, world)[0] == 0), "a fully masked token is not zero"


def test_other_negative_ids_are_rejected():
    inputs = make_inputs(SHAPES[0])
    x, idx, w = inputs[0]
    bad = idx.clone()
    bad[0, 0] = -2
    inputs[0] = ref.Routing(x, bad, w)
    with pytest.raises(ValueError, match="not -1"):
        ref.moe_reference(inputs, 0, SHAPES[0][1], SHAPES[0][0])


# --------------------------------------------------------------------------- fp8 rows
FP8 = [torch.float8_e4m3fn, torch.float8_e4m3fnuz]


@pytest.mark.parametrize("fp8_dtype", FP8, ids=["e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("H", [128, 2880, 7168, 16])
@pytest.mark.parametrize("pow2", [False, True])
def test_quantize_fp8_error_is_bounded_per_block(fp8_dtype, H, pow2):
    """e4m3 keeps 3 mantissa bits: each value is off by at most 2^-4 of its block's amax (2^-3
    with power-of-two scales, which may be up to twice as coarse)."""
    x = (torch.randn(6, H, generator=torch.Generator().manual_seed(H)) * torch.logspace(-3, 3, 6)[:, None]).bfloat16()
    q, scale = ref.quantize_fp8(x, fp8_dtype, pow2)
    blocks = -(-H // ref.FP8_BLOCK)
    assert q.dtype == fp8_dtype and q.shape == x.shape and scale.shape == (6, blocks) and scale.dtype == torch.float32
    back = ref.dequantize_fp8(q, scale)
    amax = (
        torch.nn.functional.pad(x.float().abs(), (0, blocks * ref.FP8_BLOCK - H)).unflatten(-1, (blocks, -1)).amax(-1)
    )
    bound = amax.repeat_interleave(ref.FP8_BLOCK, -1)[:, :H] * (2**-3 if pow2 else 2**-4)
    assert torch.all((back - x.float()).abs() <= bound)
    if pow2:
        assert torch.all(torch.frexp(scale).mantissa == 0.5)


@pytest.mark.parametrize("fp8_dtype", FP8, ids=["e4m3fn", "e4m3fnuz"])
def test_quantize_fp8_edges(fp8_dtype):
    fmax = torch.finfo(fp8_dtype).max
    x = torch.zeros(4, 256)
    x[1, 7] = float("nan")
    x[2, 130] = float("-inf")
    x[3, :128] = fmax  # the block's amax is the format's max: scale 1, codes at the top
    x[3, 128:] = torch.linspace(-1e4, 1e4, 128)
    q, scale = ref.quantize_fp8(x, fp8_dtype)
    back = ref.dequantize_fp8(q, scale)
    assert torch.all(back[0] == 0) and torch.all(scale[0] > 0), "an all-zero row gets zeros and a positive scale"
    assert back[1, :128].isnan().all() and not back[1, 128:].isnan().any(), "NaN stays in its block"
    assert back[2, 128:].isnan().all() and not back[2, :128].isnan().any(), "inf stays in its block"
    assert scale[3, 0] == 1.0 and torch.all(back[3, :128] == fmax)
    assert back[3, 128:].abs().max() == 1e4 and not back[3].isnan().any()


def test_quantize_fp8_rejects_other_dtypes():
    with pytest.raises(TypeError, match="float8"):
        ref.quantize_fp8(torch.zeros(1, 128), torch.bfloat16)
