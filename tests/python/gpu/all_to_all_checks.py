"""What the GPU tests check a round against, and the inputs they share.

Every rank builds every rank's inputs from one seed (moe_a2a.reference), so each rank checks its
own dispatch output and combine output locally: dispatch exactly (as sets per expert; fp8 rows
and scales bit for bit against moe_a2a.reference.quantize_fp8), combine with the challenge's
tolerance. Used by test_all_to_all.py, test_errors.py, test_fp8.py, test_round_order.py and
mixed_rounds.py (the soak's host check).
"""

import re

import torch
from conftest import gather

from moe_a2a import reference as ref


def fits(num_experts, world):
    return num_experts % world == 0 and num_experts >= world


def experts_for(num_experts, world):
    """num_experts rounded up to a multiple of the world: the same experts at world 2, 4 and 8, and a
    few more at a world of 3, 5, 6 or 7, where the test then runs instead of being refused. For tests
    whose experts are not a fixed shape's (the challenge's shapes are skipped where they do not fit)."""
    return -(-num_experts // world) * world


def to_device(inputs):
    return [ref.Routing(*(t.cuda() for t in r)) for r in inputs]


def assert_reports_lead_to(error, origin, origin_says, world):
    """This rank's `error` (a message), with every other rank's: `origin`'s matches `origin_says`,
    and every other rank's names a rank that reported an error, a chain that ends at `origin`. A
    peer may name a rank that only passed the error on: the error bit in a signal says that the
    round failed, not where (protocol.md, "Errors travel in signals"). Collective."""
    errors = gather(error)
    assert re.search(origin_says, errors[origin]), f"rank {origin}: {errors[origin]}"
    for start in range(world):
        chain = [start]
        while chain[-1] != origin:
            named = re.search(r"rank (\d+) reported an error", errors[chain[-1]])
            assert named and int(named.group(1)) not in chain, (
                f"rank {start}'s error does not lead to rank {origin}: "
                + "; ".join(f"rank {r}: {errors[r]}" for r in chain)
            )
            chain.append(int(named.group(1)))


def fake_grouped_gemm(d, rank):
    return (d.expert_x.float() * (1 + rank)).to(d.expert_x.dtype)


def per_expert(d, *rows):
    """Per local expert: its slice of each of `rows` (tensors indexed by the rows of expert_x seen
    as [rows, ...]), whatever the layout, from the offsets and counts."""
    offsets, counts = d.expert_offsets.tolist(), d.expert_num_tokens.tolist()
    return [tuple(t[o : o + n] for t in rows) for o, n in zip(offsets, counts)]


def expert_rows(d):
    """Per local expert: (x rows, meta rows, weights) whatever the layout."""
    H = d.expert_x.shape[-1]
    return per_expert(d, d.expert_x.reshape(-1, H), d.expert_meta.reshape(-1, 3), d.expert_weights.reshape(-1))


def check_layout(d, layout, alignment=1):
    offsets, counts = d.expert_offsets.tolist(), d.expert_num_tokens.tolist()
    E_local = len(counts)
    if layout == "packed":
        padded = [-(-n // alignment) * alignment for n in counts]  # each count rounded up to the alignment
        assert offsets[0] == 0 and all(offsets[e + 1] == offsets[e] + padded[e] for e in range(E_local)), (
            f"packed offsets {offsets} do not follow the counts {counts} (alignment {alignment})"
        )
        assert offsets[-1] <= d.expert_x.shape[0]
        for e in range(E_local):  # the padding rows are zeros
            pad = d.expert_x[offsets[e] + counts[e] : offsets[e + 1]]
            if pad.element_size() == 1:  # fp8 rows: compared as bytes (fp8 has no == on every device)
                pad = pad.view(torch.uint8)
            assert torch.all(pad == 0), f"expert {e}: padding rows are not zero"
    else:
        cap = d.expert_x.shape[1]
        assert offsets == [e * cap for e in range(E_local + 1)], f"padded offsets {offsets}"
        assert all(n <= cap for n in counts)


def check_dispatch(d, inputs, rank, world, num_experts):
    rows = expert_rows(d)
    cap = max([1] + [len(m) for _, m, _ in rows])
    H = d.expert_x.shape[-1]
    x_pad = torch.zeros(len(rows), cap, H, dtype=d.expert_x.dtype, device=d.expert_x.device)
    meta_pad = torch.zeros(len(rows), cap, 3, dtype=torch.int32, device=d.expert_x.device)
    for e, (x, meta, _) in enumerate(rows):
        x_pad[e, : len(x)], meta_pad[e, : len(x)] = x, meta
    got = ref.canonical_dispatch(x_pad, d.expert_num_tokens, meta_pad, rank)
    ref.assert_dispatch_matches(got, ref.dispatch_reference(inputs, rank, num_experts, world))
    # Every delivered (src, token, k) carries that pair's router weight.
    for e, (_, meta, weights) in enumerate(rows):
        want = (
            torch.stack([inputs[int(s)].topk_weights[int(t), int(k)] for s, t, k in meta.long().tolist()])
            if len(meta)
            else torch.empty(0)
        )
        assert torch.equal(weights.cpu(), want.float()), f"rank {rank} expert {e}: weights differ"


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise: equal bytes, or both NaN (a NaN's sign bit is not part of the contract)."""
    bits = {1: torch.uint8, 4: torch.int32}[a.element_size()]
    equal = a.view(bits) == b.view(bits)
    return equal | (a.float().isnan() & b.float().isnan())


def delivered_rows(d):
    """(x rows, scale rows, meta rows) of each local expert, whatever the layout."""
    H, blocks = d.expert_x.shape[-1], d.expert_x_scale.shape[-1]
    return per_expert(d, d.expert_x.reshape(-1, H), d.expert_x_scale.reshape(-1, blocks), d.expert_meta.reshape(-1, 3))


def check_fp8_rows(d, inputs, rank, world, num_experts, fp8_dtype, pow2=False, what=""):
    """Rows, scales and the set of (src, token, k) per expert, against the reference."""
    assert d.expert_x.dtype == fp8_dtype and d.expert_x_scale.dtype == torch.float32
    expected = ref.dispatch_reference(inputs, rank, num_experts, world)
    quantized = [ref.quantize_fp8(inp.x, fp8_dtype, pow2) for inp in inputs]  # per source rank, on the CPU
    for e, (x, s, meta) in enumerate(delivered_rows(d)):
        meta = meta.long().cpu()
        order = sorted(range(len(meta)), key=lambda i: tuple(meta[i].tolist()))
        assert torch.equal(meta[order], expected.pair_meta(e)), f"{what}rank {rank} expert {e}: other rows arrived"
        if not len(meta):
            continue
        want_q = torch.stack([quantized[src][0][tok] for src, tok, _ in meta.tolist()])
        want_s = torch.stack([quantized[src][1][tok] for src, tok, _ in meta.tolist()])
        ok_q, ok_s = same_bits(x.cpu(), want_q), same_bits(s.cpu(), want_s)
        if not (ok_q.all() and ok_s.all()):
            row = int((~ok_q.all(1) | ~ok_s.all(1)).nonzero()[0])
            raise AssertionError(
                f"{what}rank {rank} expert {e} row {row} (src, token, k = {meta[row].tolist()}): "
                f"{int((~ok_q).sum())} fp8 bytes and {int((~ok_s).sum())} scales differ from quantize_fp8"
            )


def run_round(ep, inputs, rank, world, num_experts, check=True):
    x, idx, w = to_device(inputs)[rank]
    d = ep.dispatch(x, idx, w)
    out = ep.combine(fake_grouped_gemm(d, rank), d)
    ep.synchronize()
    if check:
        check_layout(d, ep.layout, ep.expert_alignment)
        check_dispatch(d, inputs, rank, world, num_experts)
        want = ref.moe_reference(inputs, rank, num_experts, world)
        assert out.shape == want.shape and out.dtype == want.dtype
        torch.testing.assert_close(out.cpu().float(), want.float(), rtol=1e-2, atol=5e-3)
    return out


def edge_inputs(case, world, E, K, H, T, dtype):
    if case == "rank0_no_tokens":
        return ref.generate_all_inputs(world, E, K, H, T, dtype, seed=3, num_tokens=[0] + [T] * (world - 1))
    if case == "all_ranks_no_tokens":
        return ref.generate_all_inputs(world, E, K, H, T, dtype, seed=3, num_tokens=0)
    if case == "max_tokens":
        return ref.generate_all_inputs(world, E, K, H, T, dtype, seed=4, num_tokens=T)
    if case == "int64_ids":
        return ref.generate_all_inputs(world, E, K, H, T, dtype, seed=5, index_dtype=torch.int64)
    inputs = ref.generate_all_inputs(world, E, K, H, T, dtype, seed=6, num_tokens=T)
    out = []
    for src, r in enumerate(inputs):
        n = r.x.shape[0]
        gen = torch.Generator().manual_seed(600 + src)  # same on every rank that builds src's inputs
        if case == "one_expert":  # every token picks experts 0..K-1: expert 0 gets everything
            idx = torch.arange(K, dtype=torch.int32).repeat(n, 1)
        elif case == "one_rank":  # every token's experts all live on the last rank
            base = (world - 1) * (E // world)
            idx = (base + torch.stack([torch.randperm(E // world, generator=gen)[:K] for _ in range(n)])).to(
                torch.int32
            )
        else:
            raise ValueError(case)
        out.append(ref.Routing(r.x, idx, r.topk_weights))
    return out
