"""What the torch ops return aliases nothing: no output shares a storage with an input or with
another output. torch.compile requires that of a custom op whose schema declares no alias: the
first call of a compiled graph checks every custom op in it (torch 2.11 warns, "This is deprecated
and will become an error in PyTorch 2.12"). A dispatch's small outputs once shared one allocation
and tripped it.

Checked here on the ops' Meta kernels, which build their outputs as the GPU kernels do
(ops.cpp DispatchOutputs), with meta tensors: no GPU, but the extension built with its test
hooks (register_shapes_for_test: an all-to-all id with shapes only), as CI builds it; skipped
where it is not built. tests/python/gpu/test_all_to_all.py checks the GPU kernels' outputs.
"""

import pytest
import torch
from torch._library.utils import _c_check_aliasing_constraint

from moe_a2a._rounds import _DispatchOutputs

H, T = 256, 16


@pytest.fixture(scope="module")
def C():
    from moe_a2a._ext import ext

    try:
        c = ext()
    except ImportError as e:
        pytest.skip(f"moe_a2a._C is not built: {e}")
    if not c.TEST_HOOKS:
        pytest.skip("moe_a2a._C is built without its test hooks (MOE_A2A_TEST_HOOKS=1)")
    return c


@pytest.fixture(params=["padded", "packed"])
def layout(request):
    return request.param


@pytest.fixture(params=["none", "e4m3fn"], ids=["bf16", "fp8"])
def fp8(request):
    return request.param


@pytest.fixture
def engine(C, layout, fp8):
    config = dict(world=2, rank=0, num_experts=8, topk=2, hidden=H, max_tokens=T, capacity=32, dtype="bfloat16")
    engine = C.register_shapes_for_test(layout=layout, fp8=fp8, **config)
    yield engine
    C.forget_shapes_for_test(engine)


def meta(*shape, dtype=torch.int32):
    return torch.empty(shape, dtype=dtype, device="meta")


class Checked:
    """Runs ops of torch.ops.moe_a2a and applies torch.compile's check to each call."""

    def __init__(self):
        self.names = []

    def __call__(self, name, *args):
        result = getattr(torch.ops.moe_a2a, name)(*args)
        _c_check_aliasing_constraint(f"moe_a2a::{name}", args, {}, result)  # raises RuntimeError
        self.names.append(name)
        return result


def test_no_output_aliases_an_input_or_another_output(engine):
    op = Checked()
    state = meta(1, dtype=torch.int64)
    x, idx, w = meta(T, H, dtype=torch.bfloat16), meta(T, 2, dtype=torch.int64), meta(T, 2, dtype=torch.float32)

    *out, dest_mask = op("dispatch", engine, state, x, None, idx, w)
    d = _DispatchOutputs(*out)
    y = torch.empty(d.expert_x.shape, dtype=torch.bfloat16, device="meta")
    route = (d.src_tokens, d.recv_token, d.recv_pos)
    combined = op("combine", engine, state, y, d.expert_weights, *route, dest_mask)
    # the backward rounds, in autograd's order
    op("combine_backward", engine, meta(1, dtype=torch.int64), torch.empty_like(combined), y, d.expert_weights,
       d.expert_offsets, d.expert_num_tokens, *route, dest_mask)  # fmt: skip
    # without weight gradients: an empty second output
    _, grad_w = op("combine_backward", engine, meta(1, dtype=torch.int64), torch.empty_like(combined), y,
                   d.expert_weights, d.expert_offsets, d.expert_num_tokens, *route, dest_mask, False)  # fmt: skip
    assert grad_w.shape == (0, 2)
    op("dispatch_backward", engine, meta(1, dtype=torch.int64), y, None, *route, dest_mask)
    # with the weights at the experts, and each pair's weight gradient asked for: a [T, topk] second output
    _, grad_w = op("dispatch_backward", engine, meta(1, dtype=torch.int64), y, d.expert_weights, *route, dest_mask,
                   True, True)  # fmt: skip
    assert grad_w.shape == (T, 2)

    dest_mask = op("dispatch_send", engine, state, x, None, idx, w)
    d = _DispatchOutputs(*op("dispatch_recv", engine, state))
    op("combine_send", engine, state, y, d.expert_weights, d.src_tokens, d.recv_token, d.recv_pos)
    op("combine_recv", engine, state, dest_mask)
    # the experts' small-rows linear layer (no all-to-all)
    rows = d.expert_x.reshape(-1, H)
    weights = torch.empty(d.expert_num_tokens.shape[0], 16, H, dtype=torch.bfloat16, device="meta")
    op("grouped_gemv", rows, weights, d.expert_offsets, d.expert_num_tokens, 2)
    fused = op("grouped_gemv", rows, weights, d.expert_offsets, d.expert_num_tokens, 0, True)  # the SwiGLU fused
    assert fused.shape == (rows.shape[0], weights.shape[1] // 2)

    # the experts' SwiGLU, weighted, and its backward
    gate = torch.empty(rows.shape[0], 16, dtype=torch.bfloat16, device="meta")
    expert_rows = (d.expert_offsets, d.expert_num_tokens)
    h = op("swiglu", gate, torch.empty_like(gate), d.expert_weights.reshape(-1), *expert_rows)
    _, _, grad_w = op("swiglu_backward", torch.empty_like(h), gate, torch.empty_like(gate),
                      d.expert_weights.reshape(-1), *expert_rows, True)  # fmt: skip
    assert grad_w.shape == (rows.shape[0],)

    schemas = {s.name.split("::")[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("moe_a2a::")}
    assert set(op.names) == schemas, f"ops not checked: {schemas - set(op.names)}"
