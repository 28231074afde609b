"""Speed-of-light byte model (BENCHMARKS.md), local to the benchmarks.

python/moe_a2a/sol.py is planned but did not exist when these scripts were written; this
module implements the formula from BENCHMARKS.md on its own so the benchmarks do not depend
on that API. If both exist, they must agree (a test can compare them).

Dispatch: each token goes once to each *distinct remote* rank among its top-k experts.
Combine: each such (token, rank) returns one partial sum. Per phase
    T = max over ranks of max(bytes out / B, bytes in / B) + L
with B the measured peer-store bandwidth of one GPU and L the one-way flag latency plus one
kernel launch.
"""
import torch

FORMULA = ("bytes = hidden * elem_size * #(token, distinct remote destination rank); "
           "SoL = max_rank max(out, in) / B + L")


def traffic_matrix(all_idx, world, num_experts):
    """M[s][d] = number of tokens of rank s that must reach rank d != s (distinct ranks per
    token, so a token with two experts on one rank counts once). all_idx: per-rank topk_idx.
    Also returns P[s][d], the (token, k) pairs, i.e. what a path without de-duplication sends."""
    epr = num_experts // world
    dev = all_idx[0].device
    m = torch.zeros(world, world, dtype=torch.int64, device=dev)
    p = torch.zeros(world, world, dtype=torch.int64, device=dev)
    for s, idx in enumerate(all_idx):
        if idx.numel() == 0:
            continue
        dest = idx.long() // epr                                    # [T, K]
        hit = torch.zeros(idx.shape[0], world, dtype=torch.bool, device=dev)
        hit.scatter_(1, dest, True)
        m[s] = hit.sum(0)
        p[s] = torch.bincount(dest.reshape(-1), minlength=world)
    m.fill_diagonal_(0)
    p.fill_diagonal_(0)
    return m.cpu().tolist(), p.cpu().tolist()       # one host sync for both


def busiest_rank_tokens(mat):
    """max over ranks of max(tokens out, tokens in). Combine is the transpose of dispatch,
    so the same number serves both phases."""
    w = len(mat)
    out = [sum(mat[s]) for s in range(w)]
    inn = [sum(mat[s][d] for s in range(w)) for d in range(w)]
    return max(max(out), max(inn)) if w else 0


def total_tokens(mat):
    return sum(sum(r) for r in mat)


def sol_us(busiest_bytes, bw_gbps, latency_us):
    """One phase: bytes / (GB/s) in us, plus the fixed latency."""
    return busiest_bytes / (bw_gbps * 1e3) + latency_us
