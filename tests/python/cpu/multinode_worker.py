"""One rank of test_multinode.py: MultiNodeAllToAll over gloo on the CPU, the in-node AllToAll
replaced by GatherExchange (the same delivery, by collectives on the CPU), so that the network
legs, the groups and the bookkeeping run for real across processes.
    python multinode_worker.py RANK WORLD RANKS_PER_NODE STORE CASE    CASE: result | overflow | backward
"backward" (nodes of one rank: the real LocalExchange, no stand-in) also checks the gradients of x
and of the router weights against their closed forms. Prints "ok <relative errors>" or the error."""

import sys
import types

import torch
import torch.distributed as dist

import moe_a2a.all_to_all
from moe_a2a import reference as ref
from moe_a2a.multinode import MultiNodeAllToAll

E, K, H, T = 16, 4, 32, 12


class GatherExchange:
    """What AllToAll (packed) delivers, by all_gather and all_reduce over the node's group."""

    def __init__(self, group, num_experts, topk, hidden, max_num_tokens, dtype, **kwargs):
        assert kwargs.get("layout") == "packed"
        self.group, self.max_tokens, self.dtype = group, max_num_tokens, dtype
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.per_rank = num_experts // self.world

    def _gather(self, t, fill):
        padded = torch.full((self.max_tokens, *t.shape[1:]), fill, dtype=t.dtype)
        padded[: t.shape[0]] = t
        out = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(out, padded, group=self.group)
        return out

    def dispatch(self, x, idx, w):
        xs, ids, ws = self._gather(x, 0), self._gather(idx.long(), -1), self._gather(w, 0)
        rows, meta, weights, counts = [], [], [], []
        for e in range(self.rank * self.per_rank, (self.rank + 1) * self.per_rank):
            n = 0
            for src in range(self.world):
                for t, k in (ids[src] == e).nonzero().tolist():
                    rows.append(xs[src][t])
                    meta.append((src, t, k))
                    weights.append(ws[src][t, k])
                    n += 1
            counts.append(n)
        expert_x = torch.stack(rows) if rows else x.new_zeros(0, x.shape[1])
        offsets = torch.tensor([0] + counts).cumsum(0).int()
        return types.SimpleNamespace(
            expert_x=expert_x,
            expert_offsets=offsets,
            expert_num_tokens=torch.tensor(counts, dtype=torch.int32),
            expert_meta=torch.tensor(meta, dtype=torch.int32).reshape(-1, 3),
            expert_weights=torch.stack(weights) if weights else torch.zeros(0),
            num_tokens=x.shape[0],
        )

    def combine(self, y, d):
        acc = torch.zeros(self.world, self.max_tokens, y.shape[1])
        for row, ((src, t, k), wt) in enumerate(zip(d.expert_meta.tolist(), d.expert_weights)):
            acc[src, t] += wt * y[row].float()
        dist.all_reduce(acc, group=self.group)
        return acc[self.rank, : d.num_tokens].to(self.dtype)

    def synchronize(self):
        pass

    def close(self):
        pass


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item() if b.numel() else 0.0


def check_backward(ep, inputs, rank, world):
    """loss = <out, g>; with the fake GEMM y(t, k) = x[t] * (1 + owner rank of k's expert):
    grad x[t] = g[t] * sum_k w[t, k] (1 + o_k), grad w[t, k] = (1 + o_k) <x[t], g[t]> (0 if unused)."""
    x0, idx, w0 = inputs[rank]
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    d = ep.dispatch(x, idx, w)
    out = ep.combine(d.expert_x * (1 + rank), d)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(rank))
    (out * g).sum().backward()
    used = idx.long() != -1
    factor = torch.where(used, 1 + ref.owner_rank(idx.long().clamp(min=0), E, world), 0).float()
    want_gx = g * (w0 * factor).sum(1, keepdim=True)
    want_gw = factor * (x0 * g).sum(1, keepdim=True)
    want = ref.moe_reference(inputs, rank, E, world)
    return f"ok {rel(out.detach(), want):.3g} {rel(x.grad, want_gx):.3g} {rel(w.grad, want_gw):.3g}"


def main():
    rank, world, per_node, store, case = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    if per_node > 1:
        moe_a2a.all_to_all.AllToAll = GatherExchange
    counts = [(0, 12, 5, 1, 12, 3, 7, 9)[r] for r in range(world)]  # 0 tokens included
    inputs = ref.generate_all_inputs(world, E, K, H, T, torch.float32, seed=9, num_tokens=counts)
    x, idx, w = inputs[rank]
    idx[::3, 0] = -1  # unused slots too
    capacity = 2 if case == "overflow" else T
    ep = MultiNodeAllToAll(None, E, K, H, T, torch.float32, ranks_per_node=per_node, node_capacity=capacity)
    try:
        if case == "backward":
            print(check_backward(ep, inputs, rank, world), flush=True)
            return
        d = ep.dispatch(x, idx, w)
        y = (d.expert_x.float() * (1 + rank)).to(x.dtype)  # the fake GEMM: x * (1 + the global rank here)
        out = ep.combine(y, d)
        ep.synchronize()
        want = ref.moe_reference(inputs, rank, E, world)
        print(f"ok {rel(out, want):.3g} {list(out.shape)}", flush=True)
    except RuntimeError as e:
        print(f"error {e}", flush=True)
    finally:
        ep.close()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
