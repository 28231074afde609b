"""AllToAll's arguments that are parsed in Python before the config reaches the core."""

from types import SimpleNamespace

import pytest
import torch

from moe_a2a import _arguments as arguments
from moe_a2a._arguments import (
    AUTO_SENDERS,
    DEFAULT_GROUPS_PER_BLOCK,
    DEFAULT_OUTPUT_BUDGET_BYTES,
    MAX_BUFFERS,
    _capacity_argument,
    _check_arguments,
    _check_blocks,
    _check_profiler,
    _choose_capacity,
    _core_config,
    _sender_blocks,
    _tuning_from_env,
    _validate,
)


@pytest.mark.parametrize(
    "given, want",
    [
        (0, (0, 0)),
        (44, (44, 44)),
        ((44, 88), (44, 88)),
        ([3], (3, 3)),
        ("0", (0, 0)),
        ("44", (44, 44)),
        ("44,88", (44, 88)),
        ("auto", (-1, -1)),
        ("auto, 7", (-1, 7)),
        (("auto", 0), (-1, 0)),
    ],
)
def test_send_sms_as_dispatch_and_combine_blocks(given, want):
    assert _sender_blocks(given) == want


@pytest.mark.parametrize("given", [(1, 2, 3), "1,2,3", ()])
def test_send_sms_with_more_than_two_parts_raises(given):
    with pytest.raises(ValueError, match="send_sms"):
        _sender_blocks(given)


def test_dispatch_dtype_is_none_or_an_fp8_format():
    """The check AllToAll and MultiNodeAllToAll share (fp8_formats.check_dispatch_dtype)."""
    import torch

    from moe_a2a.fp8_formats import FP8_FORMATS, check_dispatch_dtype

    for ok in [None, *FP8_FORMATS]:
        check_dispatch_dtype(ok)
    with pytest.raises(TypeError, match="dispatch_dtype must be None, .* got torch.float16"):
        check_dispatch_dtype(torch.float16)


# AllToAll.__init__'s pure steps (python/moe_a2a/_arguments.py). What they feed the core, and the
# collectives and allocations after them, only the GPU suite runs.


class _FakeCore:
    """Stands in for the compiled extension where a step asks it one thing."""

    def __init__(self, compiled_in=True, problem="", capacity=0):
        self.compiled_in, self.problem, self.capacity = compiled_in, problem, capacity
        self.capacity_asked_with = None

    def profiler_compiled_in(self):
        return self.compiled_in

    def validate_config(self, **config):
        return self.problem

    def default_capacity(self, budget, **config):
        self.capacity_asked_with = (budget, config)
        return self.capacity


@pytest.fixture
def core(monkeypatch):
    """Installs a _FakeCore as the ext() of AllToAll's argument steps."""
    fake = _FakeCore()
    monkeypatch.setattr(arguments, "ext", lambda: fake)
    return fake


@pytest.fixture
def no_core(monkeypatch):
    """Makes any use of the extension fail, for the steps that must not need it."""

    def unavailable():
        raise AssertionError("this step must not load the extension")

    monkeypatch.setattr(arguments, "ext", unavailable)


def _arguments(**changed):
    args = dict(dtype=torch.bfloat16, layout="padded", num_buffers=1, profile=False, dispatch_dtype=None)
    args.update(changed)
    return args


def test_plain_arguments_in_range_pass(no_core):
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for layout in ("padded", "packed"):
            for num_buffers in range(1, MAX_BUFFERS + 1):
                _check_arguments(**_arguments(dtype=dtype, layout=layout, num_buffers=num_buffers))
    _check_arguments(**_arguments(profile=True, dispatch_dtype=torch.float8_e4m3fn))


@pytest.mark.parametrize(
    "changed, error, message",
    [
        ({"dtype": "float8"}, TypeError, "dtype must be torch.bfloat16, torch.float16 or torch.float32, got float8"),
        ({"layout": "ragged"}, ValueError, r"layout must be one of \('padded', 'packed'\), got 'ragged'"),
        ({"num_buffers": 0}, ValueError, r"num_buffers must be in \[1, 4\], got 0"),
        ({"num_buffers": 5}, ValueError, r"num_buffers must be in \[1, 4\], got 5"),
        ({"profile": True, "num_buffers": 2}, ValueError, "profile=True records one buffer's rounds"),
        ({"dispatch_dtype": "int8"}, TypeError, "dispatch_dtype must be None"),
        # Several wrong: the first check in AllToAll's order names its argument.
        ({"dtype": "float8", "layout": "ragged", "num_buffers": 9}, TypeError, "dtype must be"),
        ({"layout": "ragged", "num_buffers": 9}, ValueError, "layout must be"),
        ({"num_buffers": 9, "dispatch_dtype": "int8"}, ValueError, "num_buffers must be"),
    ],
)
def test_plain_argument_out_of_range_raises_naming_it(no_core, changed, error, message):
    with pytest.raises(error, match=f"^moe_a2a: {message}"):
        _check_arguments(**_arguments(**changed))


@pytest.mark.parametrize(
    "layout, max_recv_tokens, per_expert, want",
    [
        ("packed", None, None, None),
        ("packed", 640, None, 640),
        ("padded", None, None, None),
        ("padded", None, 96, 96),
    ],
)
def test_each_layout_takes_its_own_capacity_argument(layout, max_recv_tokens, per_expert, want):
    assert _capacity_argument(layout, max_recv_tokens, per_expert) == want


@pytest.mark.parametrize(
    "layout, max_recv_tokens, per_expert, message",
    [
        ("packed", None, 96, "layout='packed' takes max_recv_tokens, not max_recv_tokens_per_expert"),
        ("packed", 640, 96, "layout='packed' takes max_recv_tokens, not max_recv_tokens_per_expert"),
        ("padded", 640, None, "layout='padded' takes max_recv_tokens_per_expert, not max_recv_tokens"),
        ("padded", 640, 96, "layout='padded' takes max_recv_tokens_per_expert, not max_recv_tokens"),
    ],
)
def test_the_other_layouts_capacity_argument_raises(layout, max_recv_tokens, per_expert, message):
    with pytest.raises(ValueError, match=f"^moe_a2a: {message}$"):
        _capacity_argument(layout, max_recv_tokens, per_expert)


def test_profiler_checks_need_no_extension_without_profile(no_core):
    _check_profiler(False, 0)  # profile_capacity is not checked either


def test_profile_needs_a_build_with_the_profiler(core):
    core.compiled_in = False
    with pytest.raises(RuntimeError, match="needs the in-kernel profiler.*MOE_A2A_PROFILE=1"):
        _check_profiler(True, 0)  # before the capacity check


@pytest.mark.parametrize("capacity, ok", [(0, False), (1, True), (1 << 20, True), ((1 << 20) + 1, False)])
def test_profile_capacity_range(core, capacity, ok):
    if ok:
        _check_profiler(True, capacity)
    else:
        with pytest.raises(ValueError, match=rf"profile_capacity must be in \[1, 2\^20\], got {capacity}"):
            _check_profiler(True, capacity)


def test_tuning_defaults_without_environment(monkeypatch):
    monkeypatch.delenv("MOE_A2A_GROUPS_PER_BLOCK", raising=False)
    monkeypatch.delenv("MOE_A2A_SEND_SMS", raising=False)
    assert _tuning_from_env(None, None) == (DEFAULT_GROUPS_PER_BLOCK, (AUTO_SENDERS, AUTO_SENDERS))


def test_tuning_from_environment_unless_given(monkeypatch):
    monkeypatch.setenv("MOE_A2A_GROUPS_PER_BLOCK", "3")
    monkeypatch.setenv("MOE_A2A_SEND_SMS", "8,16")
    assert _tuning_from_env(None, None) == (3, (8, 16))
    assert _tuning_from_env(2, 4) == (2, (4, 4))
    assert _tuning_from_env("5", "auto") == (5, (-1, -1))


def test_bad_tuning_from_environment_raises(monkeypatch):
    monkeypatch.setenv("MOE_A2A_SEND_SMS", "1,2,3")
    with pytest.raises(ValueError, match="send_sms"):
        _tuning_from_env(1, None)
    monkeypatch.setenv("MOE_A2A_GROUPS_PER_BLOCK", "many")
    with pytest.raises(ValueError):  # groups_per_block first, as int() reports it
        _tuning_from_env(None, None)


def _settings(**changed):
    """An AllToAll's settings as _core_config reads them."""
    settings = dict(
        world=4,
        rank=2,
        num_experts=32,
        experts_per_token=8,
        hidden_dim=7168,
        max_num_tokens=128,
        dtype=torch.bfloat16,
        layout="packed",
        num_sms=132,
        groups_per_block=1,
        send_sms=(-1, 5),
        expert_alignment=16,
        dispatch_dtype=None,
        fp8_pow2_scales=False,
    )
    settings.update(changed)
    return SimpleNamespace(**settings)


def test_core_config_names_the_ep_config_fields(no_core):
    assert _core_config(_settings()) == dict(
        world=4,
        rank=2,
        num_experts=32,
        topk=8,
        hidden=7168,
        max_tokens=128,
        dtype="bfloat16",
        layout="packed",
        num_blocks=132,
        groups_per_block=1,
        dispatch_senders=-1,
        combine_senders=5,
        expert_alignment=16,
        fp8="none",
        fp8_pow2_scales=0,
    )


def test_core_config_spells_dtypes_and_fp8_as_the_core_does(no_core):
    for dtype, name in [(torch.bfloat16, "bfloat16"), (torch.float16, "float16"), (torch.float32, "float32")]:
        assert _core_config(_settings(dtype=dtype))["dtype"] == name
    for fp8, name in [(torch.float8_e4m3fn, "e4m3fn"), (torch.float8_e4m3fnuz, "e4m3fnuz")]:
        config = _core_config(_settings(dispatch_dtype=fp8, fp8_pow2_scales=True))
        assert (config["fp8"], config["fp8_pow2_scales"]) == (name, 1)


def test_asked_capacity_is_kept(no_core):
    assert _choose_capacity(640, {"num_experts": 32, "world": 4}) == 640
    assert _choose_capacity("96", {"num_experts": 3, "world": 4}) == 96


def test_default_capacity_comes_from_the_core_for_the_budget(core):
    core.capacity = 1234
    for config in ({"num_experts": 32, "world": 4}, {"num_experts": 4, "world": 4}):
        assert _choose_capacity(None, config) == 1234
        assert core.capacity_asked_with == (DEFAULT_OUTPUT_BUDGET_BYTES, config)


@pytest.mark.parametrize("num_experts, world", [(30, 4), (2, 4), (0, 4)])
def test_experts_not_split_evenly_leave_the_error_to_validate(no_core, num_experts, world):
    assert _choose_capacity(None, {"num_experts": num_experts, "world": world}) == 1


def test_validate_raises_the_cores_message(core):
    _validate({})
    core.problem = "num_experts (30) must be a multiple of the world size (4)"
    with pytest.raises(ValueError, match=r"^moe_a2a: num_experts \(30\) must be a multiple"):
        _validate({})


def test_num_sms_is_at_most_the_devices_compute_units():
    _check_blocks(132, 132)
    _check_blocks(1, 304)
    with pytest.raises(ValueError, match=r"num_sms must be at most 132 .*got 133"):
        _check_blocks(133, 132)
