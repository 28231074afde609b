"""AllToAll's arguments: their defaults and limits, the checks of each before anything is loaded or
allocated, and the compiled core's config (EpConfig's fields) that they make. all_to_all.AllToAll
calls these in its __init__; their messages name the user's arguments."""

import os
from typing import Optional, Tuple

import torch

from ._ext import ext
from .fp8_formats import FP8_FORMATS, check_dispatch_dtype

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
LAYOUTS = ("padded", "packed")
# Default budget for the per-expert output of one dispatch; the worst case (padded: every
# token to one expert; packed: every token to min(topk, experts per rank) local experts) is
# used when it fits.
DEFAULT_OUTPUT_BUDGET_BYTES = 4 << 30
# Profiler records kept per track (one track per wave of a block; 24 bytes a record).
DEFAULT_PROFILE_CAPACITY = 512
# Token groups each block sends per call at most (EpConfig::groups_per_block; twice that where
# they would hold more than 16 tokens, EpConfig::num_groups).
DEFAULT_GROUPS_PER_BLOCK = 1
# AllToAll(send_sms="auto"): the kernels pick their sending blocks per launch (EpConfig kAutoSenders).
AUTO_SENDERS = -1
# Rounds that may be outstanding at once, at most (AllToAll(num_buffers=)).
MAX_BUFFERS = 4


def _sender_blocks(send_sms) -> Tuple[int, int]:
    """AllToAll(send_sms=) as EpConfig's (dispatch_senders, combine_senders): "auto" (-1), an int,
    a (dispatch, combine) pair of those, or a string "n" / "d,c" (MOE_A2A_SEND_SMS). validate_config
    checks the range."""
    if isinstance(send_sms, str):
        send_sms = [p.strip() for p in send_sms.split(",")]
    parts = send_sms if isinstance(send_sms, (list, tuple)) else [send_sms]
    if len(parts) not in (1, 2):
        raise ValueError(f'moe_a2a: send_sms must be "auto", an int or a (dispatch, combine) pair, got {send_sms!r}')
    blocks = tuple(AUTO_SENDERS if p == "auto" else int(p) for p in parts)
    return (blocks[0], blocks[-1])


def _check_arguments(dtype, layout: str, num_buffers, profile, dispatch_dtype) -> None:
    """AllToAll's checks of its plain arguments, before anything is loaded or allocated."""
    if dtype not in _DTYPES:
        raise TypeError(f"moe_a2a: dtype must be torch.bfloat16, torch.float16 or torch.float32, got {dtype}")
    if layout not in LAYOUTS:
        raise ValueError(f"moe_a2a: layout must be one of {LAYOUTS}, got {layout!r}")
    if not 1 <= int(num_buffers) <= MAX_BUFFERS:
        raise ValueError(f"moe_a2a: num_buffers must be in [1, {MAX_BUFFERS}], got {num_buffers}")
    if profile and int(num_buffers) != 1:
        raise ValueError("moe_a2a: profile=True records one buffer's rounds; use num_buffers=1 to profile")
    check_dispatch_dtype(dispatch_dtype)


def _capacity_argument(layout: str, max_recv_tokens, max_recv_tokens_per_expert):
    """The capacity argument that `layout` takes (packed: max_recv_tokens; padded:
    max_recv_tokens_per_expert), None when it was not given; giving the other one raises."""
    packed = layout == "packed"
    asked, wrong = (
        (max_recv_tokens, max_recv_tokens_per_expert) if packed else (max_recv_tokens_per_expert, max_recv_tokens)
    )
    if wrong is not None:
        right, other = (
            ("max_recv_tokens", "max_recv_tokens_per_expert")
            if packed
            else ("max_recv_tokens_per_expert", "max_recv_tokens")
        )
        raise ValueError(f"moe_a2a: layout={layout!r} takes {right}, not {other}")
    return asked


def _check_profiler(profile: bool, profile_capacity) -> None:
    """AllToAll(profile=, profile_capacity=): apart from _check_arguments, as it asks the loaded
    extension whether the build has the profiler."""
    if profile and not ext().profiler_compiled_in():
        raise RuntimeError(
            "moe_a2a: AllToAll(profile=True) needs the in-kernel profiler, which this build does not have. "
            "Rebuild with it: MOE_A2A_PROFILE=1 python setup.py build_ext --inplace --force "
            "(or MOE_A2A_PROFILE=1 python3 -m pip install --no-build-isolation -e .)"
        )
    if profile and not 1 <= int(profile_capacity) <= (1 << 20):
        raise ValueError(f"moe_a2a: profile_capacity must be in [1, 2^20], got {profile_capacity}")


def _check_blocks(num_blocks: int, device_sms: int) -> None:
    """AllToAll(num_sms=) against the device: at most its compute units. A launch's blocks wait for
    one another (a quantizing dispatch's for the counts its last reserving block publishes, a
    receive half for peers whose receive halves wait for this send half), so every block must be
    resident at once, one a compute unit: more blocks than units would leave some waiting for
    blocks that never start, until the timeout."""
    if num_blocks > device_sms:
        raise ValueError(
            f"moe_a2a: num_sms must be at most {device_sms} (this device's compute units: the blocks of a kernel "
            f"wait for one another, so all of them must run at once), got {num_blocks}"
        )


def _tuning_from_env(groups_per_block, send_sms) -> Tuple[int, Tuple[int, int]]:
    """AllToAll(groups_per_block=, send_sms=) as the config takes them; one not given (None) comes
    from MOE_A2A_GROUPS_PER_BLOCK or MOE_A2A_SEND_SMS, else its default."""
    if groups_per_block is None:
        groups_per_block = int(os.environ.get("MOE_A2A_GROUPS_PER_BLOCK", DEFAULT_GROUPS_PER_BLOCK))
    if send_sms is None:
        send_sms = os.environ.get("MOE_A2A_SEND_SMS", "auto")
    return int(groups_per_block), _sender_blocks(send_sms)


def _core_config(ep) -> dict:
    """The config, in one place: the compiled core's EpConfig fields (csrc/bindings/module.cpp
    make_config) from an AllToAll's settings, all but the capacity (_choose_capacity). The core
    validates it (validate_config); its messages name the AllToAll arguments that set the fields
    (module.cpp argument_name)."""
    return dict(
        world=ep.world,
        rank=ep.rank,
        num_experts=ep.num_experts,
        topk=ep.experts_per_token,
        hidden=ep.hidden_dim,
        max_tokens=ep.max_num_tokens,
        dtype=_DTYPES[ep.dtype],
        layout=ep.layout,
        num_blocks=ep.num_sms,
        groups_per_block=ep.groups_per_block,
        dispatch_senders=ep.send_sms[0],
        combine_senders=ep.send_sms[1],
        expert_alignment=ep.expert_alignment,
        fp8=FP8_FORMATS.get(ep.dispatch_dtype, "none"),
        fp8_pow2_scales=int(ep.fp8_pow2_scales),
    )


def _choose_capacity(asked: Optional[int], config: dict) -> int:
    """The capacity asked for, else the core's default for DEFAULT_OUTPUT_BUDGET_BYTES."""
    if asked is not None:
        return int(asked)
    if config["num_experts"] % max(config["world"], 1) == 0 and config["num_experts"] >= config["world"]:
        return ext().default_capacity(DEFAULT_OUTPUT_BUDGET_BYTES, **config)
    return 1  # validate_config names the real problem


def _validate(config: dict) -> None:
    problem = ext().validate_config(**config)
    if problem:
        raise ValueError(f"moe_a2a: {problem}")
