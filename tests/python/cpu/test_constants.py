"""The constants Python keeps next to the C++ ones it mirrors (the CPU tests run without the compiled
extension, so Python cannot take them from it): each pair read from the headers' text and compared,
so that a change on one side fails here instead of disagreeing at run time."""

import re
from pathlib import Path

from moe_a2a import _arguments, local_exchange, node_legs, nodes, reference

INCLUDE = Path(__file__).resolve().parents[3] / "include" / "moe_a2a"


def cxx_constants():
    """{name: value} of every `inline constexpr int kName = N;` in the headers."""
    found = {}
    for header in INCLUDE.rglob("*.h"):
        for name, value in re.findall(r"inline constexpr int (k\w+) = (-?\d+);", header.read_text()):
            found[name] = int(value)
    return found


def test_python_mirrors_equal_the_headers():
    c = cxx_constants()
    assert _arguments.AUTO_SENDERS == c["kAutoSenders"]
    assert _arguments.DEFAULT_GROUPS_PER_BLOCK == c["kDefaultGroupsPerBlock"]
    assert nodes.MAX_RANKS_PER_NODE == c["kMaxWorld"]
    assert reference.MASKED_SLOT == node_legs.UNUSED == local_exchange.UNUSED == c["kMaskedSlot"]


def test_the_header_reader_finds_them():
    c = cxx_constants()
    assert {"kAutoSenders", "kDefaultGroupsPerBlock", "kMaxWorld", "kMaskedSlot", "kMaxTokensPerRank"} <= set(c)
    assert c["kMaxTokensPerRank"] == 4096  # the limit README, the docstrings and the integration's messages name
