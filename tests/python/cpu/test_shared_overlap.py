"""The shared expert launched early on a side stream (moe_a2a.integrations.shared_overlap) without
a GPU: a stand-in for the streams records the forks and joins, runs the work inline and says
whether a capture is on, so what is checked is which blocks launch it (in a capture, after an
eager forward confirmed the block), that the kept result is used only for the block's unchanged
input, and that every fork is joined; the tiny models' logits equal the reference's. The real
streams, in DecodeGraph's capture, run in tests/python/gpu/test_transformers.py."""

import contextlib
import copy
import os
import sys

import pytest
import torch
import torch.distributed as dist

transformers = pytest.importorskip("transformers")

import moe_a2a.integrations.transformers as moe_tf  # noqa: E402
from moe_a2a.integrations import shared_overlap  # noqa: E402
from moe_a2a.local_exchange import LocalExchange  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tiny_moe_models import COMMON, build  # noqa: E402


class RecordedStreams:
    """shared_overlap's streams on the CPU: work runs inline; forks and joins are counted; a
    capture is on while `capture` is True."""

    def __init__(self):
        self.forks = self.joins = 0
        self.capture = False

    def on_gpu(self, x):
        return True

    def capturing(self):
        return self.capture

    def fork(self, device):
        self.forks += 1
        return contextlib.nullcontext()

    def join(self, device):
        self.joins += 1


@pytest.fixture
def streams(monkeypatch):
    recorded = RecordedStreams()
    monkeypatch.setattr(shared_overlap, "streams", recorded)
    return recorded


@pytest.fixture
def one_rank_group(tmp_path, monkeypatch):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    monkeypatch.setattr(moe_tf._Shared, "get", lambda self, E, K, H, dtype, device: LocalExchange(E, K, H, 4096, dtype))
    yield
    dist.destroy_process_group()


def counted_shared_forwards(model):
    """A list that gets one entry per run of a shared expert's own forward (early or not)."""
    calls = []
    for state in shared_overlap.overlap_states(model):
        base = state.base_forward

        def counted(m, *args, _base=base, **kwargs):
            calls.append(type(m).__name__)
            return _base(m, *args, **kwargs)

        state.base_forward = counted
    return calls


# DeepSeek-V3 adds shared_experts(its input) after the experts; Llama 4's block (moe_a2a's own
# forward) calls its shared expert on its input; Qwen2-MoE calls it on a view, before its router.
@pytest.mark.parametrize("name,used", [("deepseek_v3", True), ("llama4_text", True), ("qwen2_moe", False)])
def test_a_capture_launches_it_early_where_the_block_adds_it_for_its_own_input(name, used, streams, one_rank_group):
    reference = build(name)
    reference.set_experts_implementation("eager")
    model = moe_tf.expert_parallel(copy.deepcopy(reference))
    states = shared_overlap.overlap_states(model)
    blocks = len(moe_tf.moe_experts(model))
    assert len(states) == blocks > 0
    calls = counted_shared_forwards(model)
    ids = torch.randint(1, COMMON["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = reference(ids).logits
        streams.capture = True  # not confirmed yet: a capture only watches
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
        assert streams.forks == 0 and len(calls) == blocks
        assert all(s.confirmed == used and s.enabled == used for s in states)
        for forward in range(2):  # an eager forward, then a capture
            streams.capture = forward == 1
            torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
        assert streams.joins == streams.forks  # every fork joined before the forward returned
        if used:  # the capture launched it early, once a block, and used that result
            assert streams.forks == blocks and [s.taken for s in states] == [1] * blocks
        else:  # never launched: the first forward showed the block calling it another way
            assert streams.forks == 0 and [s.taken for s in states] == [0] * blocks
        assert len(calls) == 3 * blocks  # computed once a block a forward either way


def test_nothing_is_launched_while_autograd_records(streams, one_rank_group):
    model = moe_tf.expert_parallel(build("deepseek_v3"))
    ids = torch.randint(1, COMMON["vocab_size"], (1, 5))
    with torch.no_grad():
        model(ids)  # confirms the block
    streams.capture = True
    model(ids).logits.sum().backward()
    assert streams.forks == 0 and [s.taken for s in shared_overlap.overlap_states(model)] == [0]
    with torch.inference_mode():  # inference tensors keep no version counter to prove nothing wrote them
        model(ids)
    assert streams.forks == 0


class WritesItsInput(torch.nn.Module):
    """A block that writes its input in place before the shared expert reads it."""

    def __init__(self):
        super().__init__()
        self.shared_experts = torch.nn.Linear(4, 4)

    def forward(self, x):
        x.mul_(2.0)
        return self.shared_experts(x)


def test_an_input_written_after_the_launch_is_computed_again(streams):
    block = WritesItsInput()
    state = shared_overlap.overlap_shared_expert_(block)
    assert shared_overlap.overlap_shared_expert_(block) is state  # once a block
    state.confirmed = streams.capture = True  # as if an eager forward had confirmed it
    x = torch.randn(3, 4)
    with torch.no_grad():
        got = block(x.clone())
        want = torch.nn.functional.linear(2.0 * x, block.shared_experts.weight, block.shared_experts.bias)
    torch.testing.assert_close(got, want)  # not the result of the launch, on the input before it was written
    assert state.taken == 0 and not state.enabled and streams.forks == streams.joins == 1
    assert "shared_experts.weight" in block.state_dict()  # the class changed, the names did not


class SkipsIt(WritesItsInput):
    """A block that has a shared expert and does not call it."""

    def forward(self, x):
        return 2.0 * x


def test_a_block_that_does_not_call_it_is_left_alone(streams):
    block = SkipsIt()
    state = shared_overlap.overlap_shared_expert_(block)
    with torch.no_grad():
        block(torch.randn(3, 4))  # the probe nobody took
        assert not state.enabled and not state.confirmed
        streams.capture = True
        block(torch.randn(3, 4))
    assert streams.forks == 0


def test_a_deep_copy_of_the_block_launches_its_own_shared_expert(streams):
    block = WritesItsInput()
    shared_overlap.overlap_shared_expert_(block)
    copied = copy.deepcopy(block)
    copied.forward = lambda x: copied.shared_experts(x)  # calls it on the input: confirmed
    with torch.no_grad():
        copied(torch.randn(3, 4))
    assert shared_overlap.overlap_states(copied)[0].confirmed
    assert not shared_overlap.overlap_states(block)[0].confirmed


def test_expert_parallel_can_leave_the_shared_expert_on_one_stream(streams, one_rank_group):
    model = moe_tf.expert_parallel(build("deepseek_v3"), overlap_shared_experts=False)
    assert shared_overlap.overlap_states(model) == []
    with pytest.raises(ValueError, match="no shared expert"):
        shared_overlap.overlap_shared_expert_(torch.nn.Linear(4, 4))
