"""NodeLayout without a GPU: the layout from hostnames or ranks_per_node, ranks, nodes and
rails, and the errors for layouts the multi-node design does not take."""

import os
import subprocess
import sys

import pytest

from moe_a2a.nodes import NodeLayout


def test_two_nodes_of_four_from_hostnames():
    layout = NodeLayout.from_hostnames(["a"] * 4 + ["b"] * 4)
    assert (layout.num_nodes, layout.ranks_per_node, layout.world) == (2, 4, 8)
    assert [layout.node_of(r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [layout.rail_of(r) for r in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert layout.rail_ranks(1) == [1, 5]
    assert list(layout.node_ranks(1)) == [4, 5, 6, 7]
    assert all(layout.rank_of(layout.node_of(r), layout.rail_of(r)) == r for r in range(8))


@pytest.mark.parametrize("world,per_node", [(2, 1), (4, 2), (16, 8), (64, 8)])
def test_ranks_per_node_tiles_the_world(world, per_node):
    layout = NodeLayout.from_ranks_per_node(world, per_node)
    assert layout.world == world
    rails = [layout.rail_ranks(g) for g in range(per_node)]
    assert sorted(r for rail in rails for r in rail) == list(range(world))  # every rank on one rail
    assert all(len({layout.node_of(r) for r in rail}) == layout.num_nodes for rail in rails)  # one per node


@pytest.mark.parametrize(
    "hostnames,match",
    [
        (["a", "b", "a", "b"], "consecutive"),
        (["a", "a", "a", "b"], "as many ranks"),
        (["a"] * 9, "1..8 ranks"),
        ([], "no hostnames"),
    ],
)
def test_layouts_the_design_does_not_take_are_named(hostnames, match):
    with pytest.raises(ValueError, match=match):
        NodeLayout.from_hostnames(hostnames)


def test_bad_numbers_are_named():
    with pytest.raises(ValueError, match="does not divide"):
        NodeLayout.from_ranks_per_node(6, 4)
    layout = NodeLayout(2, 2)
    with pytest.raises(ValueError, match="outside a world of 4"):
        layout.node_of(4)
    with pytest.raises(ValueError, match="no rank at node 2"):
        layout.rank_of(2, 0)


# One rank of a 4-rank gloo group whose "hostname" is a for ranks 0-1 and b for ranks 2-3.
_RANK = """
import socket, sys
import torch.distributed as dist
sys.path.insert(0, {python!r})
from moe_a2a.nodes import NodeLayout
rank = int(sys.argv[1])
socket.gethostname = lambda: "ab"[rank // 2]
dist.init_process_group("gloo", init_method="file://{store}", rank=rank, world_size=4)
print(NodeLayout.of_group(dist.group.WORLD), NodeLayout.of_group(dist.group.WORLD, ranks_per_node=1))
dist.destroy_process_group()
"""


def test_of_group_gathers_the_hostnames_or_takes_ranks_per_node(tmp_path):
    python = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python")
    code = _RANK.format(python=python, store=str(tmp_path / "store"))
    run = [sys.executable, "-c", code]
    procs = [subprocess.Popen(run + [str(r)], stdout=subprocess.PIPE, text=True) for r in range(4)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    want = f"{NodeLayout(2, 2)} {NodeLayout(4, 1)}"
    assert outs == [want] * 4, outs
