"""The GPU tests' hooks into an AllToAll, over the extension's test bindings (moe_a2a._C built
with MOE_A2A_TEST_HOOKS=1; conftest.py stops the run when they are missing). Not part of the
library: a user's AllToAll has no such calls."""

import ctypes

import torch

from moe_a2a._collective import barrier
from moe_a2a._ext import ext

BUILD_WITH_HOOKS = "MOE_A2A_TEST_HOOKS=1 python3 setup.py build_ext --inplace --force (tools/gpu_run.sh builds so)"


def hooked_ext():
    """The extension, if it was built with the tests' bindings; else an error saying how to build it."""
    if not ext().TEST_HOOKS:
        raise RuntimeError(f"moe_a2a._C was built without its test hooks: {BUILD_WITH_HOOKS}")
    return ext()


def set_rounds(ep, rounds: int) -> None:
    """Collective: ep continues as if `rounds` rounds had run (every block's epoch and every
    signal of this rank's heap region, in every buffer), e.g. right before the epoch wraps."""
    ep._check_open()
    torch.cuda.synchronize(ep.device)
    barrier(ep.group, ep.device)
    for engine in ep._engines:
        hooked_ext().engine_set_rounds_for_test(engine, int(rounds) % (1 << 64))
    barrier(ep.group, ep.device)


def _region_words(ep, region) -> torch.Tensor:
    """This rank's words of heap region `region` ((offset in an EP region, bytes)) of every
    buffer of ep, as int64, buffer after buffer."""
    ep._check_open()
    offset, nbytes = region
    views = [ep.heap._heap.tensor(ep.rank, base + offset, nbytes) for base in ep._region_offsets]
    return torch.cat([v.view(torch.int64) for v in views])


def flagged_words(ep) -> torch.Tensor:
    """This rank's flagged partial sums (comb_flagged) of every buffer of ep, as int64 words.
    Combine clears every word it read, so they are all 0 between rounds."""
    return _region_words(ep, hooked_ext().ep_flagged_region(**ep._config))


def count_words(ep) -> torch.Tensor:
    """This rank's dispatch counts (recv_count) of every buffer of ep, as int64 words: per buffer
    [world source][local experts + 1], each {32 data bits, round flag} (docs/design/protocol.md,
    "Flagged counts"); never cleared."""
    return _region_words(ep, hooked_ext().ep_count_region(**ep._config))


class ErrorRecord(ctypes.Structure):
    """include/moe_a2a/errors.h's ErrorRecord, field for field."""

    _fields_ = [
        ("code", ctypes.c_uint32),
        ("claimed", ctypes.c_uint32),
        ("peer", ctypes.c_int32),
        ("detail", ctypes.c_int32),
        ("index", ctypes.c_int64),
        ("expected", ctypes.c_uint64),
        ("seen", ctypes.c_uint64),
        ("peer_report", ctypes.c_uint32),
    ]


BAD_EXPERT_ID = 2  # ErrorCode::kBadExpertId


def error_record(ep) -> ErrorRecord:
    """The host-mapped error record of ep's (one) engine, to write as a kernel would. Not collective."""
    ep._check_open()
    (engine,) = ep._engines
    return ErrorRecord.from_address(hooked_ext().engine_error_record_for_test(engine))
