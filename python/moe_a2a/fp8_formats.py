"""What fp8 dispatch is, in one place for the library, its reference and its speed model: the
formats it quantizes to and the scale blocks (the device side: include/moe_a2a/ep/fp8.h)."""

import torch

FP8_BLOCK = 128  # channels per scale (fp8.h kFp8BlockElems)
# The fp8 dispatch formats and their names (EpConfig::fp8): e4m3fn is NVIDIA's, e4m3fnuz MI300X's.
FP8_FORMATS = {torch.float8_e4m3fn: "e4m3fn", torch.float8_e4m3fnuz: "e4m3fnuz"}
FP8_AMAX_FLOOR = 1e-30  # kFp8AmaxFloor: an all-zero block still gets a positive scale


def check_dispatch_dtype(dispatch_dtype) -> None:
    """dispatch_dtype as an all-to-all takes it (AllToAll, MultiNodeAllToAll): None (the token dtype) or
    one of FP8_FORMATS; anything else is a TypeError naming it."""
    if dispatch_dtype is not None and dispatch_dtype not in FP8_FORMATS:
        raise TypeError(
            f"moe_a2a: dispatch_dtype must be None, torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {dispatch_dtype}"
        )
