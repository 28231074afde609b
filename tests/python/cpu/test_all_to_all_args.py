"""AllToAll's arguments that are parsed in Python before the config reaches the core."""

import pytest

from moe_a2a.all_to_all import _sender_blocks


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
