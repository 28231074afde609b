"""The systems every table compares, behind one interface.

    state = system.dispatch((x, topk_idx, topk_weights))
    y     = system.fake_gemm(state)        # expert output = tokens * (1 + rank)
    out   = system.combine(y, state)       # [T, H]
    out   = system.run(inputs)             # the three in a row
    out   = system.dispatch_combine(inputs)  # dispatch -> combine of the received rows, no GEMM

ReferenceSystem  the pure-torch reference (all_gather everything, compute locally): scale.
NcclSystem       sort + all_to_all_single + sort: what a user writes without custom kernels.
SymmMemSystem    torch.distributed._symmetric_memory all_to_all_vdev_2d (+ _offset twin).
MoeA2ASystem     this library (kept here so every system shares the interface).
A constructor raises Unsupported(reason) when its system cannot run a shape; tables then
show "unsupported: <reason>" instead of a number. graph_capturable says whether the benchmarks
time the system in CUDA-graph steady state too; graph_note says why not otherwise.
"""

import common  # noqa: F401  (first: pins multicast off before torch.distributed)
import torch
import torch.distributed as dist
from common import as_inputs, gather_rows, has_extension, import_moe_a2a, reference
from fake_gemm import scale_experts, scale_packed, scale_segments

RTOL, ATOL = 1e-2, 5e-3  # the challenge's check


class Unsupported(Exception):
    pass


class System:
    name = "?"
    note = ""  # shown in the report (e.g. which fake-GEMM path ran)
    graph_capturable = False
    graph_note = "eager only (not captured in a CUDA graph here)"

    def __init__(self, ctx, shape):
        self.ctx, self.shape = ctx, shape
        if shape.experts % ctx.world:
            raise Unsupported(f"{shape.experts} experts not divisible by world {ctx.world}")
        self.epr = shape.experts // ctx.world  # experts per rank

    def dispatch(self, inputs):
        raise NotImplementedError

    def fake_gemm(self, state):
        raise NotImplementedError

    def combine(self, expert_y, state):
        raise NotImplementedError

    def passthrough(self, state):
        """The received rows themselves as the expert output (no GEMM)."""
        raise NotImplementedError

    def run(self, inputs):
        state = self.dispatch(inputs)
        return self.combine(self.fake_gemm(state), state)

    def dispatch_combine(self, inputs):
        state = self.dispatch(inputs)
        return self.combine(self.passthrough(state), state)

    def synchronize(self):
        torch.cuda.synchronize()

    def close(self):
        pass

    def check(self, all_inputs):
        """Compare run() on this rank's inputs with moe_a2a.reference.moe_reference.
        all_inputs: every rank's (x, idx, w), identical on all ranks. Returns (ok on every
        rank, max abs error over ranks)."""
        out = self.run(all_inputs[self.ctx.rank])
        self.synchronize()
        ref = reference().moe_reference(all_inputs, self.ctx.rank, self.shape.experts, self.ctx.world)
        return compare(self.ctx, out, ref)


def compare(ctx, out, ref):
    out, ref = out.float(), ref.to(out.device).float()
    ok = out.shape == ref.shape and torch.allclose(out, ref, rtol=RTOL, atol=ATOL)
    err = (out - ref).abs().max().item() if out.shape == ref.shape and out.numel() else 0.0
    t = torch.tensor([0.0 if ok else 1.0, err], device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.group)
    return t[0].item() == 0.0, t[1].item()


# ----------------------------------------------------------------------------- reference
class ReferenceSystem(System):
    """dispatch = all_gather of every rank's x / idx / weights (padded: T differs per rank);
    combine = the reference computed locally on the GPU. Slow on purpose: it is the scale."""

    name = "reference"

    def dispatch(self, inputs):
        parts = [gather_rows(self.ctx, t) for t in inputs]
        return [as_inputs(*p) for p in zip(*parts)]

    graph_note = "eager only (all_gather of ragged inputs syncs the host)"

    def fake_gemm(self, state):
        return None  # the reference applies the fake GEMM itself

    def passthrough(self, state):
        return None  # the reference always runs its own fake GEMM: d+c = pipeline here

    def combine(self, expert_y, state):
        return reference().moe_reference(state, self.ctx.rank, self.shape.experts, self.ctx.world)


# ----------------------------------------------------------------------------- NCCL
# Pure tensor steps, separate from the communication so a single process can test them.
# The layout follows what MoE frameworks do with plain collectives (Megatron's all-to-all
# dispatcher): sort the (token, k) pairs by global expert, which is destination rank then
# local expert, and send per-expert counts first; the receiver derives the expert of every
# row from those counts, so no per-row metadata travels and the source keeps the permutation.


def nccl_plan(idx, num_experts):
    """(order, counts): the pairs (pair p = token * K + k) sorted by global expert, and the
    number of pairs per global expert, both on the device with no host sync (bincount
    would sync to size its output)."""
    flat = idx.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=idx.device)
    counts.index_add_(0, flat, torch.ones_like(flat))
    return order, counts


def nccl_group(recv, recv_counts):
    """Received rows (source-major, each source's rows sorted by local expert) -> grouped by
    local expert. recv_counts: [world, epr] pairs per (source, local expert).
    Returns (expert_x, pairs per local expert, order2: grouped row i = received row order2[i])."""
    world, epr = recv_counts.shape
    expert = torch.arange(epr, device=recv.device).repeat(world)
    # output_size keeps repeat_interleave from syncing to learn its length
    le = torch.repeat_interleave(expert, recv_counts.reshape(-1), output_size=recv.shape[0])
    order2 = torch.argsort(le, stable=True)
    return recv.index_select(0, order2), recv_counts.sum(0), order2


def nccl_ungroup(expert_y, order2):
    back = torch.empty_like(expert_y)
    back.index_copy_(0, order2, expert_y)  # back to received order
    return back


def reduce_pairs(rows, order, weights, dtype):
    """rows[i] = expert output of pair order[i]. Returns sum_k w[t, k] * y[t, k] in fp32, in
    the order k = 0..K-1 (as the reference does, so no atomics and a deterministic result)."""
    t, k = weights.shape
    pairs = torch.empty_like(rows)
    pairs.index_copy_(0, order, rows)
    pairs = pairs.view(t, k, rows.shape[1])
    out = torch.zeros(t, rows.shape[1], dtype=torch.float32, device=rows.device)
    for j in range(k):
        out.addcmul_(pairs[:, j], weights[:, j : j + 1].float())
    return out.to(dtype)


class NcclSystem(System):
    name = "nccl"
    graph_note = "eager only (split sizes need a host sync: no CUDA-graph capture)"

    def dispatch(self, inputs):
        x, idx, w = inputs
        world, epr, grp = self.ctx.world, self.epr, self.ctx.group
        order, counts = nccl_plan(idx, self.shape.experts)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=grp)  # [E] -> [world (source), epr]
        send = x.index_select(0, order // idx.shape[1])
        # The one host sync: NCCL takes split sizes as host integers.
        sizes = torch.stack([counts.view(world, epr).sum(1), recv_counts.view(world, epr).sum(1)])
        send_list, recv_list = sizes.cpu().tolist()
        recv = x.new_empty(sum(recv_list), x.shape[1])
        dist.all_to_all_single(recv, send, recv_list, send_list, group=grp)
        expert_x, expert_counts, order2 = nccl_group(recv, recv_counts.view(world, epr))
        return dict(
            expert_x=expert_x,
            expert_counts=expert_counts,
            order2=order2,
            order=order,
            weights=w,
            send_list=send_list,
            recv_list=recv_list,
            dtype=x.dtype,
        )

    def fake_gemm(self, st):
        # Every received row is valid here (sizes known on the host), so a dense multiply.
        return st["expert_x"] * (1 + self.ctx.rank)

    def passthrough(self, st):
        return st["expert_x"]

    def combine(self, expert_y, st):
        back = nccl_ungroup(expert_y, st["order2"])
        ret = back.new_empty(sum(st["send_list"]), back.shape[1])
        dist.all_to_all_single(ret, back, st["send_list"], st["recv_list"], group=self.ctx.group)
        return reduce_pairs(ret, st["order"], st["weights"], st["dtype"])


# ----------------------------------------------------------------------------- symm_mem
# Limits read from torch 2.11's nvshmem_extension.cu: the dispatch kernel keeps one
# 32-thread tile per local expert in a 512-thread block (<= 16 experts per rank) and scans
# ranks within a warp; the _offset (combine) kernel swaps the two roles (<= 16 ranks,
# <= 32 experts per rank). A violated device assert would kill the process, so check here.
SYMM_MAX_EXPERTS_PER_RANK = 16
SYMM_MAX_WORLD = 16


def symm_mem_unsupported(world, shape):
    """Reason why all_to_all_vdev_2d cannot run this shape here, or '' when it can."""
    ops = getattr(torch.ops, "symm_mem", None)
    for op in ("all_to_all_vdev_2d", "all_to_all_vdev_2d_offset"):
        if ops is None or not hasattr(ops, op):
            return f"torch {torch.__version__} has no symm_mem.{op}"
    try:
        import torch.distributed._symmetric_memory as symm

        if not symm.is_nvshmem_available():
            return "NVSHMEM not available"
    except Exception as e:
        return f"symmetric memory unavailable: {e}"
    if shape.experts % world:
        return f"{shape.experts} experts not divisible by world {world}"
    epr = shape.experts // world
    if epr > SYMM_MAX_EXPERTS_PER_RANK:
        return f"{epr} experts/rank > {SYMM_MAX_EXPERTS_PER_RANK}"
    if world > SYMM_MAX_WORLD:
        return f"world {world} > {SYMM_MAX_WORLD}"
    return ""


def use_nvshmem_backend(device):
    """all_to_all_vdev_2d needs NVSHMEM-backed buffers. The backend is process-global and
    fixed by the first symmetric allocation, so everything symm_mem here goes through this."""
    import torch.distributed._symmetric_memory as symm

    try:
        if symm.get_backend(device) == "NVSHMEM":
            return
    except Exception:
        pass
    symm.set_backend("NVSHMEM")


class SymmMemSystem(System):
    """Dispatch sends the (token, k) pairs sorted by global expert (rank-major), which the op
    lays out expert-major on the owner; combine sends them back with the _offset twin, which
    restores the sorted order, so the source reduces with the same permutation."""

    name = "symm_mem"

    def __init__(self, ctx, shape):
        super().__init__(ctx, shape)
        why = symm_mem_unsupported(ctx.world, shape)
        if why:
            raise Unsupported(why)
        import torch.distributed._symmetric_memory as symm

        use_nvshmem_backend(ctx.device)
        s, dev = shape, ctx.device
        self.group_name = ctx.group.group_name
        self.max_in = s.max_tokens * s.topk
        # worst case every pair of every rank lands here; + one row per expert because the
        # op rounds an empty expert up to major_align (1) rows
        self.max_out = ctx.world * self.max_in + self.epr
        self.inp = symm.empty(self.max_in, s.hidden, dtype=s.dtype, device=dev)
        self.out = symm.empty(self.max_out, s.hidden, dtype=s.dtype, device=dev)
        self.in_splits = symm.empty(s.experts, dtype=torch.int64, device=dev)
        self.out_so = symm.empty(2, s.experts, dtype=torch.int64, device=dev)
        self.comb_out = symm.empty(self.max_in, s.hidden, dtype=s.dtype, device=dev)
        self.comb_so = symm.empty(2, s.experts, dtype=torch.int64, device=dev)
        for t in (self.inp, self.out, self.in_splits, self.out_so, self.comb_out, self.comb_so):
            symm.rendezvous(t, self.group_name)  # collective, same order on every rank

    def dispatch(self, inputs):
        x, idx, w = inputs
        flat = idx.reshape(-1).long()
        p = flat.numel()
        order = torch.argsort(flat, stable=True)
        tok = order // idx.shape[1]
        torch.index_select(x, 0, tok, out=self.inp[:p])
        self.in_splits.zero_().index_add_(0, flat, torch.ones_like(flat))  # no host sync
        torch.ops.symm_mem.all_to_all_vdev_2d(
            self.inp, self.out, self.in_splits, self.out_so, self.group_name, major_align=1
        )
        return dict(order=order, weights=w, p=p, dtype=x.dtype)

    def fake_gemm(self, st):
        # segments (local expert, source rank): offsets in out_so[1], counts in out_so[0];
        # one expert receives at most max_tokens rows from one source (distinct experts)
        scale_segments(self.out, self.out, self.out_so[1], self.out_so[0], 1 + self.ctx.rank)
        return self.out

    def passthrough(self, st):
        return self.out  # combine reads the symmetric dispatch buffer in place

    def combine(self, expert_y, st):
        if expert_y.data_ptr() != self.out.data_ptr():
            raise ValueError("symm_mem combine reads the symmetric dispatch buffer in place")
        torch.ops.symm_mem.all_to_all_vdev_2d_offset(
            self.out, self.comb_out, self.out_so, self.comb_so, self.group_name
        )
        return reduce_pairs(self.comb_out[: st["p"]], st["order"], st["weights"], st["dtype"])


# ----------------------------------------------------------------------------- moe_a2a
class MoeA2ASystem(System):
    name = "moe_a2a"
    graph_capturable = True
    graph_note = ""

    def __init__(
        self,
        ctx,
        shape,
        profile=False,
        layout="padded",
        dispatch_dtype=None,
        num_sms=None,
        send_sms=None,
        capacity=None,
    ):
        """capacity: the engine's max_num_tokens (0 or None: the shape's max tokens a rank)."""
        super().__init__(ctx, shape)
        mod, why = import_moe_a2a()
        if not has_extension(mod):
            raise Unsupported(why or "moe_a2a extension not built")
        kw = {"profile": True} if profile else {}
        if dispatch_dtype is not None:
            kw["dispatch_dtype"] = dispatch_dtype
        if num_sms is not None:
            kw["num_sms"] = num_sms
        if send_sms is not None:
            kw["send_sms"] = send_sms
        s = shape
        self.layout = layout
        self.note = f"layout {layout}" + (f", {str(dispatch_dtype)[6:]} dispatch" if dispatch_dtype else "")
        max_tokens = capacity or s.max_tokens
        self.ep = mod.AllToAll(ctx.group, s.experts, s.topk, s.hidden, max_tokens, s.dtype, layout=layout, **kw)
        self.y = None

    def dispatch(self, inputs):
        return self.ep.dispatch(*inputs)

    def _output(self, d):
        """The experts' output buffer: expert_x's shape in the token dtype (fp8 dispatch delivers
        fp8 rows, combine takes the token dtype), allocated once."""
        if self.y is None or self.y.shape != d.expert_x.shape:
            self.y = torch.zeros(d.expert_x.shape, dtype=self.ep.dtype, device=d.expert_x.device)
        return self.y

    def fake_gemm(self, d):
        # A separate output, as a real GEMM writes; only the valid rows of each expert are
        # touched, on the device (no host sync; graph-capturable). fp8 rows are read as their
        # codes' values (scales left out: the stand-in GEMM only has to read and write the rows).
        x = d.expert_x if d.expert_x_scale is None else d.expert_x.to(self.ep.dtype)
        if self.layout == "packed":
            return scale_packed(x, d.expert_offsets, d.expert_num_tokens, 1 + self.ctx.rank, out=self._output(d))
        return scale_experts(x, d.expert_num_tokens, 1 + self.ctx.rank, out=self._output(d))

    def passthrough(self, d):
        # With fp8 rows combine still needs token-dtype rows: a buffer of the right shape.
        return d.expert_x if d.expert_x_scale is None else self._output(d)

    def combine(self, expert_y, d):
        return self.ep.combine(expert_y, d)

    def synchronize(self):
        self.ep.synchronize()  # also raises errors the kernels reported

    def close(self):
        self.ep.close()


SYSTEMS = {"reference": ReferenceSystem, "nccl": NcclSystem, "symm_mem": SymmMemSystem, "moe_a2a": MoeA2ASystem}


def build(name, ctx, shape, **kw):
    """(system, '') or (None, 'unsupported: reason'). Construction is collective for the
    communicating systems, so every rank gets the same answer or the run fails loudly."""
    sys_, why = None, ""
    try:
        sys_ = SYSTEMS[name](ctx, shape, **kw)
    except Unsupported as e:
        why = f"unsupported: {e}"
    except (RuntimeError, ValueError, TypeError, ImportError) as e:  # e.g. NVSHMEM init
        why = common.error_status(e, f"building {name}", prefix="unsupported")
    # A system that failed on one rank must not run on the others (they would hang).
    flag = torch.tensor([0 if sys_ is None else 1], device=ctx.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=ctx.group)
    if flag.item() == 0 and sys_ is not None:
        sys_.close()
        sys_, why = None, "unsupported: failed on another rank"
    return sys_, why
