"""One rank of MultiNodeAllToAll's tests: tests/python/cpu/test_multinode.py (the CPU, gloo) and
tests/python/gpu/test_multinode.py (GPUs, NCCL).
    python multinode_worker.py RANK WORLD RANKS_PER_NODE INIT_METHOD CASE [GPU]
CASE: result | overflow | backward | graph | dispatch | fp8 | calls | calls_fp8. Without GPU:
the CPU over gloo, and a node of several ranks gets GatherExchange for its in-node exchange (the
same delivery, by collectives on the CPU), so that the network legs, the groups and the
bookkeeping run for real across processes; nodes of one rank run the real LocalExchange. With
GPU (a CUDA device index): NCCL, and the real in-node AllToAll. "backward" also checks the
gradients of x and of the router weights against their closed forms (not with GatherExchange,
which has none); "graph" (GPU only) captures dispatch, the fake GEMM and combine in one CUDA
graph and replays it on new inputs. "dispatch" checks what every rank's experts get against the
one-node reference's dispatch (the same pairs, the same rows; unused slots send nothing); "fp8"
does so with fp8 dispatch (the fp8 bytes and scales of quantize_fp8 of each pair's source token,
a hidden size of two scale blocks, the last short), then combines the dequantized rows. "calls"
and "calls_fp8" count the torch.distributed.all_to_all_singles of dispatch, combine and (nodes
of one rank) the backward, and print the bytes each one sends as JSON.
Prints "ok <relative errors>" or "error <message>" (result_line finds it among other output)."""

import json
import math
import sys
import types

import torch
import torch.distributed as dist

import moe_a2a.all_to_all
from moe_a2a import reference as ref
from moe_a2a.multinode import MultiNodeAllToAll
from moe_a2a.node_legs import plan_rows

E, K, H, T = 16, 4, 32, 12
FP8_H = 160  # two fp8 scale blocks, the second one short (128 + 32)
FP8 = torch.float8_e4m3fn


class GatherExchange:
    """What AllToAll (packed) delivers, by all_gather and all_reduce over the node's group."""

    def __init__(self, group, num_experts, topk, hidden, max_num_tokens, dtype, **kwargs):
        assert kwargs.get("layout") == "packed"
        self.group, self.max_tokens, self.dtype = group, max_num_tokens, dtype
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.per_rank = num_experts // self.world

    def _gather(self, t, fill):
        t = t.view(torch.uint8) if t.dtype == FP8 else t  # gloo moves no fp8: its bytes
        padded = torch.full((self.max_tokens, *t.shape[1:]), fill, dtype=t.dtype)
        padded[: t.shape[0]] = t
        out = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(out, padded, group=self.group)
        return out

    def dispatch(self, x, idx, w, x_scale=None):
        xs, ids, ws = self._gather(x, 0), self._gather(idx.long(), -1), self._gather(w, 0)
        scales = self._gather(x_scale, 0) if x_scale is not None else None
        rows, meta, weights, counts, row_scales = [], [], [], [], []
        for e in range(self.rank * self.per_rank, (self.rank + 1) * self.per_rank):
            n = 0
            for src in range(self.world):
                for t, k in (ids[src] == e).nonzero().tolist():
                    rows.append(xs[src][t])
                    if scales is not None:
                        row_scales.append(scales[src][t])
                    meta.append((src, t, k))
                    weights.append(ws[src][t, k])
                    n += 1
            counts.append(n)
        expert_x = torch.stack(rows).view(x.dtype) if rows else x.new_zeros(0, x.shape[1])
        offsets = torch.tensor([0] + counts).cumsum(0).int()
        return types.SimpleNamespace(
            expert_x=expert_x,
            expert_offsets=offsets,
            expert_num_tokens=torch.tensor(counts, dtype=torch.int32),
            expert_meta=torch.tensor(meta, dtype=torch.int32).reshape(-1, 3),
            expert_weights=torch.stack(weights) if weights else torch.zeros(0),
            expert_x_scale=None
            if x_scale is None
            else torch.stack(row_scales or [x_scale.new_zeros(x_scale.shape[1])]),
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


def result_line(output: str, case: str) -> str:
    """The worker's result for `case` ("ok ..." or "error ...", printed as "[case] ..." among
    whatever NCCL prints), or, if it printed none, its last line."""
    lines = output.strip().splitlines() or [""]
    tag = f"[{case}] "
    return next((line[len(tag) :] for line in reversed(lines) if line.startswith(tag)), lines[-1])


def rel(a, b):
    a, b = a.float().cpu(), b.float().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item() if b.numel() else 0.0


def make_inputs(world, seed, hidden=H):
    """Every rank's (x, topk_idx, topk_weights), on the CPU: unequal counts (0 included), every
    third token's first slot unused, and token 4 (where there is one) with no expert at all."""
    counts = [(0, 12, 5, 1, 12, 3, 7, 9)[r] for r in range(world)]
    inputs = ref.generate_all_inputs(world, E, K, hidden, T, torch.float32, seed=seed, num_tokens=counts)
    for _, idx, _ in inputs:
        idx[::3, 0] = -1
        idx[4:5] = -1
    return inputs


def fake_gemm(d, rank):
    """y = x * (1 + the global rank the expert is on): what ref.moe_reference assumes."""
    return d.expert_x * (1 + rank)


def check_forward(ep, inputs, rank, world, device):
    x, idx, w = (t.to(device) for t in inputs[rank])
    d = ep.dispatch(x, idx, w)
    out = ep.combine(fake_gemm(d, rank), d)
    ep.synchronize()
    return f"ok {rel(out, ref.moe_reference(inputs, rank, E, world)):.3g} {list(out.shape)}"


def check_backward(ep, inputs, rank, world, device):
    """loss = <out, g>; with the fake GEMM y(t, k) = x[t] * (1 + owner rank of k's expert):
    grad x[t] = g[t] * sum_k w[t, k] (1 + o_k), grad w[t, k] = (1 + o_k) <x[t], g[t]> (0 if unused)."""
    x0, idx, w0 = inputs[rank]
    x = x0.to(device).requires_grad_()
    w = w0.to(device).requires_grad_()
    d = ep.dispatch(x, idx.to(device), w)
    out = ep.combine(fake_gemm(d, rank), d)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(rank)).to(device)
    (out * g).sum().backward()
    used = idx.long() != -1
    factor = torch.where(used, 1 + ref.owner_rank(idx.long().clamp(min=0), E, world), 0).float()
    want_gx = g.cpu() * (w0 * factor).sum(1, keepdim=True)
    want_gw = factor * (x0 * g.cpu()).sum(1, keepdim=True)
    want = ref.moe_reference(inputs, rank, E, world)
    return f"ok {rel(out.detach(), want):.3g} {rel(x.grad, want_gx):.3g} {rel(w.grad, want_gw):.3g}"


def source_pairs(meta, inputs, rank, per_node, world, cap):
    """(source rank, source token, k) of each row an expert got, from its in-node metadata
    (in-node source rank, in-node token, k): an in-node token below the source's own count is
    its own token; past it, slot s of the rows node n forwarded to it, which the source's rail
    peer on node n packed (its plan, recomputed here from its inputs)."""
    N, node = world // per_node, rank // per_node
    pairs = []
    for local, tok, k in meta.tolist():
        src = node * per_node + local
        own = inputs[src].topk_idx.shape[0]
        if tok < own:
            pairs.append((src, tok, k))
            continue
        n, slot = divmod(tok - own, cap)
        sender = n * per_node + local
        plan = plan_rows(inputs[sender].topk_idx, E, N, cap, n)
        pairs.append((sender, int(plan.token[node, slot]), k))
    return pairs


def dispatch_problem(d, inputs, rank, world, per_node, cap, quantized):
    """What is wrong with what this rank's experts got, or None: each must get the one-node
    reference's pairs (unused slots none), each row its source token, or with fp8 (quantized:
    quantize_fp8 of every rank's x, on the CPU) its bytes and scales."""
    want = ref.dispatch_reference(inputs, rank, E, world)
    for e, (start, n) in enumerate(zip(d.expert_offsets.tolist(), d.expert_num_tokens.tolist())):
        pairs = source_pairs(d.expert_meta[start : start + n].cpu(), inputs, rank, per_node, world, cap)
        if sorted(pairs) != [tuple(p) for p in want.pair_meta(e).tolist()]:
            return f"expert {e}: pairs {sorted(pairs)}, the reference's {want.pair_meta(e).tolist()}"
        order = sorted(range(n), key=lambda i: pairs[i])
        rows = d.expert_x[start : start + n].cpu()[order]
        sources = [(src, t) for src, t, _ in sorted(pairs)]
        if quantized is None:
            want_x = torch.stack([inputs[src].x[t] for src, t in sources] or [rows[:0]]).reshape(rows.shape)
            if not torch.equal(rows, want_x):
                return f"expert {e}: rows differ from their source tokens"
            continue
        scales = d.expert_x_scale[start : start + n].cpu()[order]
        want_q = torch.stack([quantized[src][0][t] for src, t in sources] or [rows[:0]]).reshape(rows.shape)
        want_s = torch.stack([quantized[src][1][t] for src, t in sources] or [scales[:0]]).reshape(scales.shape)
        if rows.dtype != FP8 or not torch.equal(rows.view(torch.uint8), want_q.view(torch.uint8)):
            return f"expert {e}: fp8 rows differ from quantize_fp8 of their tokens"
        if not torch.equal(scales, want_s):
            return f"expert {e}: fp8 scales differ from quantize_fp8's"
    return None


def check_dispatch(ep, inputs, rank, world, per_node, device, fp8=False):
    """dispatch_problem, then combine (always: every rank takes part in it): with fp8 of the
    dequantized rows, which must give the reference's result on the dequantized inputs."""
    x, idx, w = (t.to(device) for t in inputs[rank])
    d = ep.dispatch(x, idx, w)
    ep.synchronize()
    quantized = [ref.quantize_fp8(inp.x, FP8) for inp in inputs] if fp8 else None
    problem = dispatch_problem(d, inputs, rank, world, per_node, ep.node_capacity, quantized)
    if fp8:
        y = ref.dequantize_fp8(d.expert_x, d.expert_x_scale, torch.float32) * (1 + rank)
        inputs = [
            ref.Routing(ref.dequantize_fp8(*q), inp.topk_idx, inp.topk_weights) for q, inp in zip(quantized, inputs)
        ]
    else:
        y = fake_gemm(d, rank)
    out = ep.combine(y, d)
    ep.synchronize()
    return f"error {problem}" if problem else f"ok {rel(out, ref.moe_reference(inputs, rank, E, world)):.3g}"


def check_calls(ep, inputs, rank, world, per_node, device, fp8=False):
    """ "ok {step: [bytes sent by each all_to_all_single]}" for dispatch, combine and, on nodes of
    one rank (LocalExchange, differentiable), the backward of <combine, 1> with the router
    weights requiring grad (and x too, without fp8)."""
    sent, real = [], dist.all_to_all_single

    def counted(output, input, *args, **kwargs):
        sent.append(input.numel() * input.element_size())
        return real(output, input, *args, **kwargs)

    def step(name, fn, *args):
        dist.all_to_all_single = counted
        try:
            result = fn(*args)
        finally:
            dist.all_to_all_single = real
        steps[name] = sent[:]
        sent.clear()
        return result

    steps = {}
    x0, idx, w0 = inputs[rank]
    grads = per_node == 1
    x = x0.to(device).requires_grad_(grads and not fp8)
    w = w0.to(device).requires_grad_(grads)
    d = step("dispatch", ep.dispatch, x, idx.to(device), w)
    y = ref.dequantize_fp8(d.expert_x, d.expert_x_scale, torch.float32) * (1 + rank) if fp8 else fake_gemm(d, rank)
    out = step("combine", ep.combine, y, d)
    if grads:
        step("backward", lambda: out.sum().backward())
    ep.synchronize()
    return "ok " + json.dumps(steps)


def dispatch_record_bytes(hidden, topk, token_bytes, fp8):
    """docs/design/multinode.md's dispatch record: the row (fp8: H bytes, then ceil(H / 128) fp32
    scales at a 4-byte offset), K int32 ids, K fp32 weights, padded to 16 bytes."""
    row = hidden + (-hidden) % 4 + math.ceil(hidden / 128) * 4 if fp8 else hidden * token_bytes
    return -(-(row + topk * 4 + topk * 4) // 16) * 16


def expected_calls(nodes, fp8, backward):
    """What check_calls must print for this file's shapes (fp32 tokens, node_capacity T): one
    all_to_all_single per leg, dispatch nodes x T records, combine nodes x T partial rows; the
    backward one of each: the partials' gradients, and the rows' (not fp8) and weights' gradients
    in one record of their own."""
    hidden = FP8_H if fp8 else H
    steps = {"dispatch": [nodes * T * dispatch_record_bytes(hidden, K, 4, fp8)], "combine": [nodes * T * hidden * 4]}
    if backward:
        grad_record = -(-(K * 4 + (0 if fp8 else hidden * 4)) // 16) * 16
        steps["backward"] = [nodes * T * hidden * 4, nodes * T * grad_record]  # combine's backward runs first
    return steps


def check_graph(ep, rank, world, device):
    """One CUDA graph of dispatch, the fake GEMM and combine (the network legs' NCCL calls
    included), captured on one set of inputs and replayed on two others of the same counts."""
    sets = [make_inputs(world, seed) for seed in (9, 10, 11)]
    static = [t.to(device) for t in sets[0][rank]]
    check_forward(ep, sets[0], rank, world, device)  # eager first: NCCL's communicators exist before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        d = ep.dispatch(*static)
        out = ep.combine(fake_gemm(d, rank), d)
    errors = []
    for inputs in (sets[1], sets[2], sets[1]):
        for dst, src in zip(static, inputs[rank]):
            dst.copy_(src)
        graph.replay()
        ep.synchronize()
        errors.append(rel(out, ref.moe_reference(inputs, rank, E, world)))
    return "ok " + " ".join(f"{e:.3g}" for e in errors)


def run_case(case, rank, world, per_node, device) -> str:
    """One case on a MultiNodeAllToAll of its own: its result line."""
    fp8 = case in ("fp8", "calls_fp8")
    hidden = FP8_H if fp8 else H
    inputs = make_inputs(world, seed=9, hidden=hidden)
    capacity = 2 if case == "overflow" else T
    ep = MultiNodeAllToAll(
        None,
        E,
        K,
        hidden,
        T,
        torch.float32,
        ranks_per_node=per_node,
        node_capacity=capacity,
        dispatch_dtype=FP8 if fp8 else None,
    )
    try:
        if case in ("dispatch", "fp8"):
            return check_dispatch(ep, inputs, rank, world, per_node, device, fp8=case == "fp8")
        if case in ("calls", "calls_fp8"):
            return check_calls(ep, inputs, rank, world, per_node, device, fp8=fp8)
        if case == "backward":
            return check_backward(ep, inputs, rank, world, device)
        if case == "graph":
            return check_graph(ep, rank, world, device)
        return check_forward(ep, inputs, rank, world, device)
    except RuntimeError as e:
        return f"error {e}"
    finally:
        ep.close()


def main():
    """rank, world, per_node, init, cases[, gpu]: `cases` a comma-separated list, run in order in
    this one process (one start-up for all), each printed as "[case] <result>". A case that may
    leave ranks apart (overflow: only the ranks that sent too much raise) goes last."""
    rank, world, per_node, init = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    cases = sys.argv[5].split(",")
    gpu = int(sys.argv[6]) if len(sys.argv) > 6 else None
    if gpu is None:
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
        if per_node > 1:
            moe_a2a.all_to_all.AllToAll = GatherExchange
    else:
        # No device_id: NCCL makes a communicator for a group at its first collective, and only
        # the node and rail groups have any (two ranks of this test may share a GPU in the world).
        device = torch.device("cuda", gpu)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    # Every rank leaves together, so the store's host (rank 0) does not go first: gloo, which
    # needs no GPU per rank.
    leaving = dist.new_group(backend="gloo")
    try:
        for case in cases:
            print(f"[{case}] {run_case(case, rank, world, per_node, device)}", flush=True)
    finally:
        dist.barrier(group=leaving)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
