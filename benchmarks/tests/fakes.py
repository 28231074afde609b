"""Stand-ins the benchmark tests share: a process group's context and an input pool, no GPU."""

import torch


class FakePool:
    """InputPool stand-in: every rank's routing of each entry, no process group."""

    def __init__(self, entries):
        self.entries = entries  # entries[j][r] = rank r's topk_idx
        self.items = [(torch.zeros(len(e[0]), 4), e[0], None) for e in entries]

    def __len__(self):
        return len(self.entries)

    def routing(self, j):
        return self.entries[j % len(self.entries)]


class FakeCtx:
    """A benchmark's context: rank 0 of 2, on the CPU, no process group."""

    world, rank, device, group = 2, 0, torch.device("cpu"), None


class FakeCtxOfThree:
    """Rank 1 of 3, for the gathers where a rank sits between two others."""

    world, rank, device, group = 3, 1, torch.device("cpu"), None
