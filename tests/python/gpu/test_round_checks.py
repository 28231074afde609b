"""The soak's GPU checks (round_checks.py) pass on right rounds and catch wrong ones.

The long soak checks most of its rounds only there, so a check that cannot fail would make 10^5
rounds prove nothing. Each case runs one real round (checked on the host against the reference
first), asserts that no GPU check fails on it, then breaks one output the way a protocol bug
would (a row's token or weight, a row's (source, token, k), a pair delivered twice, a count, the
packed padding, a combined value, a gradient) and asserts that the check named for it fails.
"""

import dataclasses

import pytest
import torch
import torch.distributed as dist
from mixed_rounds import Bank, Shape, Spec, run_round
from round_checks import Everyone, combine_failures, dispatch_failures, explain_out, shares_of_out

bf16 = torch.bfloat16
SHAPES = {
    "packed": Shape(4, 3, 256, 16, bf16, "packed", alignment=16),
    "padded": Shape(4, 3, 256, 16, torch.float32, "padded"),
    "fp8": Shape(4, 3, 384, 16, bf16, "packed", fp8=torch.float8_e4m3fn),
}


def failed_checks(o, shape, bank, rank, world):
    every = Everyone(shape, o, bank, world, o.out.device)
    failed = {**dispatch_failures(o, shape, every, rank, world), **combine_failures(o, shape, every, bank, rank)}
    return {name for name, bad in failed.items() if bool(bad)}


def with_dispatch(o, **fields):
    return dataclasses.replace(o, d=dataclasses.replace(o.d, **fields))


def first_rows(o, n):
    """Row numbers (of expert_x seen as [rows, H]) of the first n rows of the fullest local expert."""
    counts, offsets = o.d.expert_num_tokens.tolist(), o.d.expert_offsets.tolist()
    e = max(range(len(counts)), key=counts.__getitem__)
    assert counts[e] >= n, f"expert {e} got {counts[e]} rows; the case needs {n}"
    return [offsets[e] + i for i in range(n)]


def broken_dispatches(o, shape):
    """(check that must fail, the outcome with one dispatch output broken)."""
    d, H = o.d, shape.hidden
    r0, r1 = first_rows(o, 2)
    x = d.expert_x.reshape(-1, H).clone()
    if shape.fp8 is None:
        x[r0, 5] = x[r0, 5] * 2 + 1
    else:  # the fp8 maximum of the other sign: off by at least the block's largest value
        negative = bool(x.view(torch.uint8)[r0, 5] & 0x80)
        x.view(torch.uint8)[r0, 5] = 0x7E if negative else 0xFE
    weights = d.expert_weights.reshape(-1).clone()
    weights[r1] += 0.25
    wrong_k = d.expert_meta.reshape(-1, 3).clone()
    wrong_k[r0, 2] = (wrong_k[r0, 2] + 1) % shape.topk  # the token's next slot: another expert (no duplicate ids)
    out_of_range = d.expert_meta.reshape(-1, 3).clone()
    out_of_range[r1, 0] = 8  # no such source rank
    twice = d.expert_meta.reshape(-1, 3).clone()
    twice[r1] = twice[r0]
    counts = d.expert_num_tokens.clone()
    counts[0] += 1
    cases = [
        ("rows", with_dispatch(o, expert_x=x.view(d.expert_x.shape))),
        ("weights", with_dispatch(o, expert_weights=weights.view(d.expert_weights.shape))),
        ("pairs", with_dispatch(o, expert_meta=wrong_k.view(d.expert_meta.shape))),
        ("pairs", with_dispatch(o, expert_meta=out_of_range.view(d.expert_meta.shape))),
        ("repeats", with_dispatch(o, expert_meta=twice.view(d.expert_meta.shape))),
        ("counts", with_dispatch(o, expert_num_tokens=counts)),
    ]
    if shape.layout == "packed" and shape.alignment > 1:
        offsets, n = d.expert_offsets.tolist(), d.expert_num_tokens.tolist()
        pads = [offsets[e] + n[e] for e in range(len(n)) if offsets[e] + n[e] < offsets[e + 1]]
        assert pads, "no padding row to break: pick another seed"
        padded = d.expert_x.clone()
        padded.view(torch.uint8)[pads[0], 0] = 1
        cases.append(("padding", with_dispatch(o, expert_x=padded)))
    return cases


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_gpu_checks_catch_each_broken_output(name, rank, world):
    shape = SHAPES[name]
    device = torch.device("cuda", torch.cuda.current_device())
    bank = Bank(shape, world, rank, device)
    spec = Spec((shape.max_tokens,) * world, "uniform", masked=0.1, kind="fused", seed=5)  # no duplicate ids
    with shape.build(dist.group.WORLD, world, device) as ep:
        [o] = run_round(ep, shape, spec, bank, rank, world, device, check=True)  # right, says the host
        assert failed_checks(o, shape, bank, rank, world) == set(), "a GPU check failed a right round"
        for check, broken in broken_dispatches(o, shape):
            assert check in failed_checks(broken, shape, bank, rank, world), f"{check}: not caught"
        out = o.out.clone()
        out[1, 3] += 1.0
        assert failed_checks(dataclasses.replace(o, out=out), shape, bank, rank, world) == {"out"}
        out[1, 3] = float("nan")
        assert failed_checks(dataclasses.replace(o, out=out), shape, bank, rank, world) == {"out"}
        assert_explained(o, shape, bank, rank, world)


def assert_explained(o, shape, bank, rank, world):
    """The soak's message for a failed "out" names what a lost or repeated remote write leaves:
    a token whose sum lacks, or holds twice, the share of one expert rank."""
    T = o.spec.tokens[rank]
    assert explain_out(o, shape, bank, rank, world).startswith(f"out on the host: 0 of {T} tokens off")
    shares = shares_of_out(o, shape, bank, rank, world)
    d, t = divmod(int(shares.abs().sum(2).argmax()), T)  # the largest share of any token
    for sign, says in ((-1, f"lacks rank {d}'s share"), (1, f"holds rank {d}'s share twice")):
        out = o.out.clone()
        out[t] = (shares[:, t].sum(0) + sign * shares[d, t]).to(out.dtype)
        why = explain_out(dataclasses.replace(o, out=out), shape, bank, rank, world)
        assert why.startswith(f"out on the host: 1 of {T} tokens off") and says in why, why


def test_gpu_checks_catch_broken_gradients(rank, world):
    shape = SHAPES["packed"]
    device = torch.device("cuda", torch.cuda.current_device())
    bank = Bank(shape, world, rank, device)
    spec = Spec((shape.max_tokens,) * world, "skewed", masked=0.1, kind="backward", seed=6)
    with shape.build(dist.group.WORLD, world, device) as ep:
        [o] = run_round(ep, shape, spec, bank, rank, world, device, check=True)
        assert failed_checks(o, shape, bank, rank, world) == set(), "a GPU check failed a right backward round"
        grad_x, grad_w = o.grad_x.clone(), o.grad_w.clone()
        grad_x[2, 7] += 0.5
        grad_w[3, 1] += 1.0
        assert failed_checks(dataclasses.replace(o, grad_x=grad_x), shape, bank, rank, world) == {"grad x"}
        assert failed_checks(dataclasses.replace(o, grad_w=grad_w), shape, bank, rank, world) == {"grad w"}
