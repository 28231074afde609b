"""Which ranks of a process group share a node: the layout the multi-node AllToAll is planned
on (docs/design/multinode.md, issue 39). A node's ranks reach each other through IPC (today's
kernels); ranks of other nodes through NCCL/RCCL, each on its rail: the rank with the same local
index on every node. Nothing here moves data: moe_a2a.multinode does, on this layout.

    layout = NodeLayout.of_group(group)                      # collective: hostnames gathered once
    layout = NodeLayout.of_group(group, ranks_per_node=2)    # or say it (emulated nodes on one host)
    layout.node_of(rank), layout.rail_of(rank), layout.rail_ranks(g)
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import List, Optional, Sequence

MAX_RANKS_PER_NODE = 8  # IPC peers of one node (kMaxWorld)


@dataclass(frozen=True)
class NodeLayout:
    """num_nodes nodes of ranks_per_node ranks each; node n holds the consecutive ranks
    n * ranks_per_node .. (n + 1) * ranks_per_node - 1."""

    num_nodes: int
    ranks_per_node: int

    def __post_init__(self):
        if self.num_nodes < 1 or not 1 <= self.ranks_per_node <= MAX_RANKS_PER_NODE:
            raise ValueError(
                f"moe_a2a: a node layout needs >= 1 node of 1..{MAX_RANKS_PER_NODE} ranks, got {self.num_nodes} "
                f"node(s) of {self.ranks_per_node}"
            )

    @property
    def world(self) -> int:
        return self.num_nodes * self.ranks_per_node

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world:
            raise ValueError(f"moe_a2a: rank {rank} outside a world of {self.world}")

    def node_of(self, rank: int) -> int:
        self._check_rank(rank)
        return rank // self.ranks_per_node

    def rail_of(self, rank: int) -> int:
        """The rank's local index on its node: its rail to the other nodes."""
        self._check_rank(rank)
        return rank % self.ranks_per_node

    def rank_of(self, node: int, rail: int) -> int:
        if not (0 <= node < self.num_nodes and 0 <= rail < self.ranks_per_node):
            raise ValueError(f"moe_a2a: no rank at node {node}, rail {rail} of {self}")
        return node * self.ranks_per_node + rail

    def node_ranks(self, node: int) -> range:
        return range(self.rank_of(node, 0), self.rank_of(node, 0) + self.ranks_per_node)

    def rail_ranks(self, rail: int) -> List[int]:
        """The ranks with local index `rail` on every node, in node order: one network group."""
        return [self.rank_of(n, rail) for n in range(self.num_nodes)]

    @classmethod
    def from_ranks_per_node(cls, world: int, ranks_per_node: int) -> "NodeLayout":
        if ranks_per_node < 1 or world % ranks_per_node != 0:
            raise ValueError(f"moe_a2a: ranks_per_node={ranks_per_node} does not divide the world of {world} ranks")
        return cls(world // ranks_per_node, ranks_per_node)

    @classmethod
    def from_hostnames(cls, hostnames: Sequence[str]) -> "NodeLayout":
        """The layout of a group whose rank r runs on hostnames[r]: every host's ranks must be
        consecutive and every host must have as many (what torchrun gives with the same
        --nproc-per-node on every node); otherwise pass ranks_per_node."""
        if not hostnames:
            raise ValueError("moe_a2a: no hostnames")
        runs = []  # (host, ranks) in rank order
        for h in hostnames:
            if runs and runs[-1][0] == h:
                runs[-1][1] += 1
            else:
                runs.append([h, 1])
        hosts = [h for h, _ in runs]
        if len(set(hosts)) != len(hosts):
            raise ValueError(
                f"moe_a2a: the ranks of a node must be consecutive; ranks by host, in rank order: {runs} "
                "(launch with the same --nproc-per-node on every node, or pass ranks_per_node)"
            )
        sizes = {n for _, n in runs}
        if len(sizes) != 1:
            raise ValueError(f"moe_a2a: every node must have as many ranks; ranks by host: {runs}")
        return cls(len(runs), sizes.pop())

    @classmethod
    def of_group(cls, group, ranks_per_node: Optional[int] = None) -> "NodeLayout":
        """Collective over `group` (all its ranks, same arguments): from ranks_per_node if given
        (several "nodes" emulated on one host, say), else from every rank's hostname."""
        import torch.distributed as dist

        from ._collective import all_gather

        world = dist.get_world_size(group)
        if ranks_per_node is not None:
            return cls.from_ranks_per_node(world, int(ranks_per_node))
        return cls.from_hostnames(all_gather(socket.gethostname(), group))
