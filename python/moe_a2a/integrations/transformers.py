"""Hugging Face transformers models, expert-parallel on moe_a2a: data-parallel attention (every
rank runs its own sequences through a replicated model) and expert-parallel MoE layers (each
rank keeps 1/world of every layer's experts; tokens travel by dispatch and combine).

    import moe_a2a.integrations.transformers as moe_tf
    model = AutoModelForCausalLM.from_config(config)          # or from_pretrained, same on every rank
    moe_tf.expert_parallel(model, max_num_tokens=2048)         # collective: shards, sets the backend
    out = moe_tf.generate(model, input_ids=ids, max_new_tokens=32)   # ranks may stop at different steps
    moe_tf.close(model)

How it plugs in: transformers 5 routes every `@use_experts_implementation` experts module through
`ALL_EXPERTS_FUNCTIONS[config._experts_implementation](self, hidden_states, top_k_index,
top_k_weights)`. This module registers "moe_a2a" there (on import). expert_parallel() keeps only
this rank's contiguous block of experts of every experts module (global expert e lives on rank
e // (E / world), as in AllToAll), frees the others, and sets the backend. The forward is
dispatch (the router's global ids and weights) -> the local experts' grouped GEMMs with the
model's own activation, gate and bias -> combine. Routers, shared experts and everything else
stay replicated and compute what they did; in a captured decode step a DeepSeek-style block's
shared expert runs on a second stream beside the exchange (shared_overlap). Llama 4's MoE
block, whose experts are off that interface, gets a forward of its own on moe_a2a
(scored_input_forward); a family that is neither is refused at expert_parallel() with its name
and the reason (REFUSED_FAMILIES).

MoE calls are collective: every rank must run the same number of forward passes. generate()
steps until all of a rank's sequences are done, which differs between ranks; generate() below
passes synced_gpus=True, transformers' own mechanism for this (a rank that is done keeps taking
part in the forward passes, with its finished sequences, until every rank is done). A rank that
stops calling anyway makes its peers' next MoE call time out after timeout_s, with an error that
says so, instead of hanging.

Tested with transformers >= 5.17, < 6 (SUPPORTED); other versions raise at import.
"""

from __future__ import annotations

import contextlib
import math
import re
import weakref
from typing import Optional

import torch
import torch.distributed as dist

from .. import grouped_gemv as gemv
from .._collective import GroupRef, all_gather
from ..layers import _grouped_mm_expected, expert_row_mask
from ._forward_class import give_forward_
from .shared_overlap import overlap_shared_expert_, shared_expert_of

SUPPORTED = (5, 17), (6, 0)  # [lowest, highest) transformers version this integration is tested with
BACKEND = "moe_a2a"
DEFAULT_MAX_NUM_TOKENS = 4096


def _check_version() -> None:
    import transformers

    found = tuple(int(p) for p in re.findall(r"\d+", transformers.__version__)[:2])
    low, high = SUPPORTED
    if not low <= found < high:
        raise ImportError(
            f"moe_a2a.integrations.transformers needs transformers >= {low[0]}.{low[1]}, < "
            f"{high[0]}.{high[1]} (the experts backend interface it plugs into); found "
            f"{transformers.__version__}"
        )


_check_version()

from transformers.integrations import moe as _tf_moe  # noqa: E402
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS  # noqa: E402

# --------------------------------------------------------------------------- sharding arithmetic


def local_expert_range(num_experts: int, world: int, rank: int) -> range:
    """The global experts rank `rank` keeps: the contiguous block AllToAll assigns to it."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"moe_a2a: rank {rank} outside a world of {world}")
    if num_experts < world or num_experts % world != 0:
        raise ValueError(f"moe_a2a: {num_experts} experts cannot be split evenly over {world} ranks")
    per_rank = num_experts // world
    return range(rank * per_rank, (rank + 1) * per_rank)


# Model families whose MoE layers do not go through transformers' experts interface, and why
# (transformers 5.17; `tools/hf_moe_families.py` lists every MoE family with what expert_parallel()
# does with it). A family not named here and without experts modules gets the generic reason.
REFUSED_FAMILIES = {
    "aria": "its MoE layer (AriaTextMoELayer) sorts and runs its experts with a grouped GEMM of its own, "
    "not through the experts interface",
    "jetmoe": "its experts (JetMoeParallelExperts, a mixture of attention and MLP experts) are routed in the "
    "layer's own forward, not through the experts interface",
    "longcat_flash": "it mixes zero-compute (identity) experts with the routed ones in its own forward, "
    "not through the experts interface",
    "step3p7": "its experts (Step3p7Experts) loop over the experts in their own forward, not through the "
    "experts interface",
    "switch_transformers": "an encoder-decoder whose experts are a ModuleDict of dense MLPs routed in the "
    "block's own forward, not through the experts interface",
    "nllb-moe": "an encoder-decoder whose experts are a ModuleDict of dense MLPs routed in the block's own "
    "forward, not through the experts interface",
    "doge": "its 'experts' (DogeCDMoE) are retrieved by product keys, not top-k routed MLPs",
}
REFUSED_FAMILIES["aria_text"] = REFUSED_FAMILIES["aria"]


def refusal(model: torch.nn.Module) -> str:
    """Why expert_parallel() does not serve `model` (one without experts modules): its family's
    reason from REFUSED_FAMILIES, or what its MoE blocks are."""
    family = getattr(getattr(model, "config", None), "model_type", None)
    reason = REFUSED_FAMILIES.get(family)
    if reason is None:
        blocks = sorted(
            {type(m).__name__ for _, m in model.named_modules() if re.search("Mo[Ee]|Experts", type(m).__name__)}
        )
        reason = (
            "it has no experts module that transformers dispatches through its experts interface "
            "(@use_experts_implementation)" + (f"; its MoE modules: {', '.join(blocks)}" if blocks else "")
        )
    return f"moe_a2a: {family or type(model).__name__} models are not served: {reason}"


def experts_modules(model: torch.nn.Module) -> list:
    """(name, module) of every experts module transformers dispatches through the experts
    interface (those built with @use_experts_implementation: 3-D gate_up_proj or up_proj, and
    down_proj, one slice per expert)."""
    found = []
    for name, m in model.named_modules():
        if not (hasattr(type(m), "_apply_gate") and hasattr(m, "has_gate") and hasattr(m, "down_proj")):
            continue
        up = m.gate_up_proj if m.has_gate else getattr(m, "up_proj", None)
        if isinstance(up, torch.Tensor) and up.dim() == 3 and m.down_proj.dim() == 3:
            found.append((name, m))
    return found


_EXPERT_PARAMS = ("gate_up_proj", "up_proj", "down_proj", "gate_up_proj_bias", "up_proj_bias", "down_proj_bias")


def shard_experts_(module: torch.nn.Module, world: int, rank: int) -> range:
    """Keeps only this rank's experts of one experts module, in place: every per-expert
    parameter (dim 0 = experts) becomes its slice for local_expert_range(...), and the full
    tensor is freed. Returns the range. Raises if the module was sharded already."""
    if getattr(module, "_moe_a2a_experts", None) is not None:
        raise RuntimeError("moe_a2a: this experts module is expert-parallel already")
    num_experts = int(module.down_proj.shape[0])
    local = local_expert_range(num_experts, world, rank)
    for pname in _EXPERT_PARAMS:
        p = getattr(module, pname, None)
        if not isinstance(p, torch.Tensor):
            continue
        if p.shape[0] != num_experts:
            raise ValueError(f"moe_a2a: {pname} has {p.shape[0]} experts, down_proj {num_experts}")
        kept = p.detach()[local.start : local.stop].clone()  # a copy: the full tensor's memory goes
        setattr(module, pname, torch.nn.Parameter(kept, requires_grad=p.requires_grad))
    module._moe_a2a_experts = (num_experts, local)
    return local


# --------------------------------------------------------------------------- the shared AllToAll


class _Shared:
    """What a model's experts modules share: one AllToAll per (experts, top-k, hidden, dtype,
    device, tokens per forward), created on the first forward that needs it (a collective
    moment: every rank runs the same layers in the same order), and the settings to create it
    with. Tokens per forward is max_num_tokens, or the bound of the tokens_per_forward() block
    the forward runs in: an AllToAll's expert buffers, and the experts' work on them, scale with
    it, so a decode step of a few tokens does not pay for the prefill's thousands."""

    def __init__(self, group, max_num_tokens: int, layout: str, timeout_s: float, num_sms: Optional[int]):
        self.group = GroupRef(group, "expert-parallel transformers model")
        self.max_num_tokens, self.layout, self.timeout_s, self.num_sms = max_num_tokens, layout, timeout_s, num_sms
        self.tokens = max_num_tokens  # per forward, per rank: what the AllToAll in use is sized for
        self.all_to_all = {}

    def get(self, num_experts: int, topk: int, hidden: int, dtype: torch.dtype, device: torch.device):
        key = (num_experts, topk, hidden, dtype, device, self.tokens)
        ep = self.all_to_all.get(key)
        if ep is None:
            from ..all_to_all import AllToAll

            ep = AllToAll(
                self.group.get(),
                num_experts,
                topk,
                hidden,
                self.tokens,
                dtype,
                layout=self.layout,
                timeout_s=self.timeout_s,
                device=device,
                num_sms=self.num_sms,
            )
            self.all_to_all[key] = ep
        return ep

    def close(self) -> None:
        for ep in self.all_to_all.values():
            ep.close()
        self.all_to_all.clear()


def _shared(model) -> _Shared:
    shared = _models.get(model)
    if shared is None:
        raise RuntimeError("moe_a2a: this model is not expert-parallel; call expert_parallel(model) first")
    return shared


@contextlib.contextmanager
def tokens_per_forward(model: torch.nn.Module, n: int):
    """A block in which no rank feeds any MoE layer of `model` more than n tokens per forward
    (1 <= n <= the model's max_num_tokens): its forwards use an AllToAll sized for n rounded up
    to a power of two (created at its first use, then kept), so that the receive buffers, and
    the experts' elementwise work over them, scale with n rather than max_num_tokens. The
    rounding bounds what many different n cost: at most one AllToAll per power of two, whose
    heaps together are under twice the largest one's. A decode step of B sequences is B tokens;
    DecodeGraph enters this block with the largest B of any rank. Collective: every rank enters
    it with the same n around the same forwards (the AllToAll is chosen by n alone; ranks that
    disagree raise, where the AllToAll is created (their configs differ) or, once both exist,
    when their first MoE call times out)."""
    shared = _shared(model)
    if not 1 <= int(n) <= shared.max_num_tokens:
        raise ValueError(
            f"moe_a2a: tokens_per_forward takes 1 <= n <= the model's max_num_tokens ({shared.max_num_tokens}), got {n}"
        )
    before, shared.tokens = shared.tokens, min(1 << (int(n) - 1).bit_length(), shared.max_num_tokens)
    try:
        yield
    finally:
        shared.tokens = before


def tokens_per_forward_of_all(model: torch.nn.Module, n: int) -> int:
    """The largest of every rank's n (a host collective over the model's group, for setup
    moments such as a CUDA graph's first step, never per forward)."""
    shared = _shared(model)
    return max(all_gather(int(n), shared.group.get()))


# --------------------------------------------------------------------------- the experts backend


def grouped_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    offsets: torch.Tensor,
    counts: torch.Tensor,
    transposed: bool,
    rank_pairs: float = math.inf,
) -> torch.Tensor:
    """Per local expert e, the rows [offsets[e], offsets[e] + counts[e]) of x [rows, in] times
    expert e's weight: [E, out, in] (transformers' default, like nn.Linear) or, transposed,
    [E, in, out]. rank_pairs: the most (token, k) pairs a rank feeds the layer (the AllToAll's
    max_num_tokens x top-k); every rank's spread over world x E experts, so an expert gets
    rank_pairs / E rows on average. Where that is a few (a decode step) and no gradient is asked
    for, moe_a2a's grouped_gemv (moe_a2a.grouped_gemv.applies); else torch._grouped_mm for bf16 on
    compute capability >= 9.0 (rows of no expert undefined); otherwise one matmul per expert after
    one host sync (rows of no expert zero)."""
    y = _small_rows(x, weight, offsets, counts, transposed, rank_pairs)
    if y is not None:
        return y
    w = weight if transposed else weight.transpose(-1, -2)  # [E, in, out]
    if _grouped_mm_expected(x) and w.dtype == x.dtype:
        return torch._grouped_mm(x, w, offs=offsets[1:].to(torch.int32))
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"moe_a2a: the experts of an expert-parallel model inside a CUDA graph need moe_a2a's grouped_gemv "
            f"(a few rows an expert) or torch._grouped_mm (bf16 weights and rows on compute "
            f"capability >= 9.0); these are {x.dtype} rows and {w.dtype} weights at {rank_pairs / w.shape[0]:.3g} "
            "rows an expert on average, whose matmul per expert needs the counts on the host"
        )
    E = w.shape[0]
    meta = torch.cat([offsets[:E].long(), counts.long()]).tolist()
    ys, rows = [], []
    for e in range(E):
        s, n = meta[e], meta[E + e]
        if n > 0:
            ys.append(x[s : s + n] @ w[e])
            rows.append(torch.arange(s, s + n, device=x.device))
    if not ys:  # no row here: an empty product keeps x and the weights in the graph, so that both
        # get a gradient (zeros), as the full model's unused experts do, and autograd reaches dispatch
        ys.append(x[:0] @ w[0])
        rows.append(torch.arange(0, device=x.device))
    out = x.new_zeros(x.shape[0], w.shape[-1])
    return out.index_copy(0, torch.cat(rows), torch.cat(ys))  # differentiable in every slice


def _small_rows(x, weight, offsets, counts, transposed, rank_pairs, swiglu=False) -> Optional[torch.Tensor]:
    """grouped_gemv's product (with the SwiGLU fused, swiglu=True) where grouped_gemv.applies at
    rank_pairs / E rows an expert (grouped_linear), else None."""
    rows_per_expert = rank_pairs / weight.shape[0]
    out_in = weight.transpose(-1, -2) if transposed else weight  # [E, out, in]
    if not gemv.applies(x, out_in, rows_per_expert, swiglu=swiglu):
        return None
    return gemv.grouped_gemv(x, out_in, offsets, counts, gemv.rows_per_pass(rows_per_expert), swiglu=swiglu)


def _row_bias(bias: torch.Tensor, offsets: torch.Tensor, rows: int) -> torch.Tensor:
    """bias [E, out] -> [rows, out]: each row gets its expert's bias (rows past the last expert
    the last expert's; they are never combined). No host sync."""
    row = torch.arange(rows, device=offsets.device)
    e = torch.searchsorted(offsets[1:].long().contiguous(), row, right=True).clamp(max=bias.shape[0] - 1)
    return bias[e]


def _exchange(experts, hidden_states, top_k_index, top_k_weights, local_experts) -> torch.Tensor:
    """dispatch -> local_experts(experts, rows, offsets, counts, rank_pairs) -> combine, over the
    AllToAll that expert_parallel() gave the experts module `experts`; rank_pairs is the most
    (token, k) pairs a rank feeds it (grouped_linear)."""
    shared = getattr(experts, "_moe_a2a_shared", None)
    if shared is None:
        raise RuntimeError(
            "moe_a2a: this experts module is not expert-parallel; call "
            "moe_a2a.integrations.transformers.expert_parallel(model) first"
        )
    num_experts, _ = experts._moe_a2a_experts
    ep = shared.get(
        num_experts, int(top_k_index.shape[-1]), int(hidden_states.shape[-1]), hidden_states.dtype, hidden_states.device
    )
    if hidden_states.shape[0] > ep.max_num_tokens:
        where = (
            f"max_num_tokens={ep.max_num_tokens}; pass a larger max_num_tokens to expert_parallel() (at most 4096)"
            if shared.tokens == shared.max_num_tokens
            else f"the {ep.max_num_tokens} of the tokens_per_forward() block it runs in; enter it with a larger n"
        )
        raise ValueError(
            f"moe_a2a: {hidden_states.shape[0]} tokens reach this MoE layer in one call, more than {where}, "
            "or feed fewer tokens per forward (smaller prefill batches)"
        )
    try:
        d = ep.dispatch(hidden_states, top_k_index, top_k_weights.float())
    except RuntimeError as e:
        if "timed out" in str(e):
            raise RuntimeError(
                f"{e}. In a transformers model this usually means the ranks ran different numbers "
                "of forward passes: generate with moe_a2a.integrations.transformers.generate() "
                "(synced_gpus=True), and run every forward on every rank"
            ) from e
        raise
    x = d.expert_x if ep.layout == "packed" else d.expert_x.reshape(-1, d.expert_x.shape[-1])
    rank_pairs = ep.max_num_tokens * top_k_index.shape[-1]
    y = local_experts(experts, x, d.expert_offsets, d.expert_num_tokens, rank_pairs)
    return ep.combine(y.to(hidden_states.dtype).reshape(d.expert_x.shape), d)


def _default_swiglu(experts) -> bool:
    """Whether the experts module gates as transformers' default does with SiLU: act_fn(gate) * up
    over the halves of its concatenated gate_up projection (its class keeps the decorator's
    _default_apply_gate; act_fn is torch's SiLU or transformers' SiLUActivation, both F.silu).
    grouped_gemv(swiglu=True) computes exactly that chain."""
    default_gate = getattr(_tf_moe, "_default_apply_gate", None)
    return (
        default_gate is not None
        and getattr(type(experts), "_apply_gate", None) is default_gate
        and type(experts.act_fn).__name__ in ("SiLU", "SiLUActivation")
        and getattr(experts, "is_concatenated", True)
    )


def _up_and_gate(self, x, offsets, counts, rank_pairs, valid) -> torch.Tensor:
    """The experts' up projection and its activation: [rows, intermediate]. One grouped_gemv with
    the SwiGLU fused where it applies (a decode step; the default gate with SiLU, no bias),
    else the projection, its bias (on the rows `valid` marks) and self._apply_gate or act_fn."""
    up_w = self.gate_up_proj if self.has_gate else self.up_proj
    if self.has_gate and not self.has_bias and _default_swiglu(self):
        h = _small_rows(x, up_w, offsets, counts, self.is_transposed, rank_pairs, swiglu=True)
        if h is not None:
            return h
    h = grouped_linear(x, up_w, offsets, counts, self.is_transposed, rank_pairs)
    if self.has_bias:
        up_bias = self.gate_up_proj_bias if self.has_gate else self.up_proj_bias
        h = torch.where(valid, h + _row_bias(up_bias, offsets, x.shape[0]), 0.0)
    return self._apply_gate(h) if self.has_gate else self.act_fn(h)


def _interface_experts(self, x, offsets, counts, rank_pairs=math.inf) -> torch.Tensor:
    """An experts module of the experts interface on its rows: the model's own projections,
    activation, gate, biases and post-expert norm, grouped by expert.

    Rows of no expert (past the last expert, packed; past each count, padded) hold undefined
    values, and so do their gradients from the backward of combine. The grouped matmuls never
    read them, but a bias or a norm weight sums its gradient over every row, so where the module
    has either, those rows are set to zero, which also gives them a zero gradient."""
    post_norm = getattr(self, "has_post_expert_norm", False)  # transformers >= 5.24
    valid = expert_row_mask(offsets, counts, x.shape[0])[:, None] if self.has_bias or post_norm else None
    h = _up_and_gate(self, x, offsets, counts, rank_pairs, valid)
    y = grouped_linear(h, self.down_proj, offsets, counts, self.is_transposed, rank_pairs)
    if self.has_bias:
        y = torch.where(valid, y + _row_bias(self.down_proj_bias, offsets, x.shape[0]), 0.0)
    if post_norm:  # on each expert's output, before combine weights it (as transformers' experts);
        # masked on both sides: its weight's gradient reads its input and its output's gradient
        y = torch.where(valid, self.post_expert_norm(torch.where(valid, y, 0.0)), 0.0)
    return y


def experts_forward(
    self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """The "moe_a2a" experts implementation: dispatch -> local experts -> combine."""
    return _exchange(self, hidden_states, top_k_index, top_k_weights, _interface_experts)


# --------------------------------------------------------------------------- Llama 4's MoE block
# Llama4TextMoe scales each token by its router score (the sigmoid of its top-k logits) before
# the experts and sums their outputs unweighted, next to a shared expert. Its experts module
# (Llama4TextExperts: gate_up_proj [E, H, 2I], down_proj [E, I, H]) runs every expert on every
# token in its own forward, not through the experts interface, so expert_parallel() gives the
# block a forward of its own (by class: a subclass of the model's class, this instance only;
# transformers is not patched). Each (token, k) pair travels as a row of its own, already scaled,
# with weight 1: the experts see what Llama 4's see, and combine sums their outputs.


def _is_scored_input_block(m: torch.nn.Module) -> bool:
    """A block of Llama 4's kind: transformers' Llama4TextMoe, or one expert_parallel() served."""
    return type(m).__name__ == "Llama4TextMoe" or isinstance(m, tuple(_served_classes.values()))


def scored_input_blocks(model: torch.nn.Module) -> list:
    """(name, block) of every MoE block of Llama 4's kind (Llama4TextMoe)."""
    return [(name, m) for name, m in model.named_modules() if _is_scored_input_block(m)]


def _scored_input_experts(experts, x, offsets, counts, rank_pairs=math.inf) -> torch.Tensor:
    """Llama4TextExperts on its rows: gate and up from one projection, SiLU-gated, down."""
    gate, up = grouped_linear(x, experts.gate_up_proj, offsets, counts, True, rank_pairs).chunk(2, dim=-1)
    return grouped_linear(up * experts.act_fn(gate), experts.down_proj, offsets, counts, True, rank_pairs)


def scored_input_forward(self, hidden_states: torch.Tensor):
    """Llama4TextMoe's forward with its experts on moe_a2a: (output, router logits), as the
    model's own."""
    x = hidden_states.reshape(-1, self.hidden_dim)
    _, logits = self.router(x)
    top_logits, top_ids = torch.topk(logits, self.top_k, dim=1)  # the router's own choice
    scores = torch.sigmoid(top_logits.float()).to(x.dtype)
    tokens, k = top_ids.shape
    scaled = (x[:, None, :] * scores[..., None]).reshape(tokens * k, x.shape[-1])  # row t * k + j
    ones = torch.ones(tokens * k, 1, device=x.device)
    routed = _exchange(self.experts, scaled, top_ids.reshape(tokens * k, 1), ones, _scored_input_experts)
    # on the block's input itself, as [tokens, H]: the result the overlap launched early (shared_overlap)
    out = self.shared_expert(hidden_states).reshape(x.shape)
    out.add_(routed.reshape(tokens, k, -1).sum(dim=1))
    return out, logits


_served_classes = {}  # the model's block class -> its subclass with scored_input_forward


def _serve_scored_input_block(block: torch.nn.Module) -> None:
    give_forward_(block, "ExpertParallel", scored_input_forward, _served_classes)


def _moe_layers(model: torch.nn.Module) -> list:
    """(name, experts module, on the experts interface?) of every MoE layer, in layer order."""
    interface = {id(m) for _, m in experts_modules(model)}
    found = []
    for name, m in model.named_modules():
        if id(m) in interface:
            found.append((name, m, True))
        elif _is_scored_input_block(m):
            found.append((name + ".experts", m.experts, False))
    return found


def moe_experts(model: torch.nn.Module) -> list:
    """(name, experts module) of every MoE layer expert_parallel() serves, in layer order: the
    experts interface's modules and the experts of Llama 4's blocks."""
    return [(name, m) for name, m, _ in _moe_layers(model)]


def register() -> None:
    """Registers the "moe_a2a" experts implementation in transformers (done on import)."""
    ALL_EXPERTS_FUNCTIONS.register(BACKEND, experts_forward)


register()


# --------------------------------------------------------------------------- the model


_models = weakref.WeakKeyDictionary()  # model -> _Shared


def expert_parallel(
    model: torch.nn.Module,
    group=None,
    *,
    max_num_tokens: int = DEFAULT_MAX_NUM_TOKENS,
    layout: str = "packed",
    timeout_s: float = 10.0,
    num_sms: Optional[int] = None,
    overlap_shared_experts: bool = True,
):
    """Collective over `group` (default: the world): makes `model` data-parallel + expert-
    parallel, in place, and returns it. Every rank must pass the same model (same config and
    the same weights: load or initialise it the same way everywhere).

    Every experts module keeps its local experts only (local_expert_range), the full weights
    are freed, and the model's experts implementation becomes "moe_a2a". max_num_tokens bounds
    the tokens one rank feeds one MoE layer in one forward (batch x new sequence length; at
    most 4096); the AllToAll (one per model, shared by all layers) is created at the first
    forward. Close it with close(model) (or let it be garbage collected with the model).

    Llama 4's MoE blocks (off the experts interface) change class, this instance only: each
    becomes a subclass of its class whose forward is scored_input_forward, and its experts keep
    their local slice. With overlap_shared_experts, a block that adds a shared expert of its input
    to its experts' output (DeepSeek-V3's kind) runs it on a second stream beside the router and
    the exchange in a CUDA graph capture without autograd (shared_overlap: the shared expert's
    class changes, this instance only, and the block gets hooks). A model with neither kind of MoE
    layer raises ValueError naming its family and the reason (refusal, REFUSED_FAMILIES)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "moe_a2a: expert_parallel needs torch.distributed initialised (torchrun + init_process_group)"
        )
    group = group if group is not None else dist.group.WORLD
    if model in _models:
        raise RuntimeError("moe_a2a: this model is expert-parallel already")
    if not 1 <= int(max_num_tokens) <= DEFAULT_MAX_NUM_TOKENS:
        raise ValueError(f"moe_a2a: max_num_tokens must be in [1, {DEFAULT_MAX_NUM_TOKENS}], got {max_num_tokens}")
    modules = moe_experts(model)
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    names = [name for name, _ in modules]
    agreed = all_gather((names, int(max_num_tokens), layout, float(timeout_s), num_sms), group)
    if any(a != agreed[0] for a in agreed):
        raise RuntimeError(
            f"moe_a2a: expert_parallel was called with different models or arguments on different ranks: {agreed}"
        )
    if not modules:
        raise ValueError(refusal(model))
    for name, m in modules:
        E = int(m.down_proj.shape[0])
        if E % world != 0 or E < world:
            raise ValueError(f"moe_a2a: {name} has {E} experts, which do not split evenly over {world} ranks")
    shared = _Shared(group, int(max_num_tokens), layout, float(timeout_s), num_sms)
    for _, m in modules:
        shard_experts_(m, world, rank)
        m._moe_a2a_shared = shared
    for _, block in scored_input_blocks(model):
        _serve_scored_input_block(block)
    if overlap_shared_experts:
        served = {id(m) for _, m in modules}
        for block in model.modules():
            if id(getattr(block, "experts", None)) in served and shared_expert_of(block) is not None:
                overlap_shared_expert_(block)
    _models[model] = shared
    interface = [m for _, m, on_interface in _moe_layers(model) if on_interface]
    if interface and hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(BACKEND)
    else:  # a bare module tree (or none on the interface): set it where each experts module looks
        for m in interface:
            m.config._experts_implementation = BACKEND
    return model


def generate(model, *args, **kwargs):
    """model.generate(...) with synced_gpus=True: every rank keeps running forward passes until
    every rank's sequences are done, so the MoE layers' collective calls line up. Collective
    over the default process group (transformers synchronises over it).

    A rank with no sequences passes input_ids=None (and no other inputs): it takes part with
    0 tokens in every forward pass the other ranks run, and returns None."""
    if model not in _models:
        raise RuntimeError("moe_a2a: generate() is for models made expert-parallel with expert_parallel()")
    if kwargs.get("synced_gpus") is False:
        raise ValueError("moe_a2a: an expert-parallel model must generate with synced_gpus=True")
    if not args and kwargs.get("input_ids", 0) is None:
        return _take_part_idle(model)
    kwargs["synced_gpus"] = True
    return model.generate(*args, **kwargs)


def _take_part_idle(model) -> None:
    """The collective calls of transformers' synced_gpus generation with nothing to generate.
    What a forward pass does collectively is every MoE layer's dispatch and combine, in layer
    order; this rank makes them with 0 tokens (the rest of the model has no collective call and
    is skipped). transformers (5.17 <= version < 6, see _sample) runs the prefill forward, then
    per step the "anyone unfinished?" all-reduce and, from the second step on, a forward; this
    rank says "finished" and follows the same sequence until no rank is unfinished."""
    layers = [(m, on_interface) for _, m, on_interface in _moe_layers(model)]
    device = layers[0][0].down_proj.device

    def moe_layers_with_no_tokens():
        with torch.no_grad():
            for m, on_interface in layers:
                if on_interface:
                    hidden = m.down_proj.shape[2] if m.is_transposed else m.down_proj.shape[1]
                    topk, experts = int(m.config.num_experts_per_tok), _interface_experts
                else:  # Llama 4's: one row per (token, k), down_proj [E, I, H]
                    hidden, topk, experts = m.down_proj.shape[2], 1, _scored_input_experts
                no_ids = torch.empty(0, topk, dtype=torch.long, device=device)
                _exchange(m, m.down_proj.new_empty(0, hidden), no_ids, torch.empty(0, topk, device=device), experts)

    moe_layers_with_no_tokens()  # the prefill
    step = 0
    while True:
        unfinished = torch.zeros((), device=device)
        dist.all_reduce(unfinished, op=dist.ReduceOp.SUM)
        if unfinished.item() == 0.0:
            return None
        if step > 0:  # the first step consumes the prefill's output
            moe_layers_with_no_tokens()
        step += 1


def is_expert_parallel(model) -> bool:
    return model in _models


def close(model) -> None:
    """Frees the AllToAll(s) of an expert-parallel model (every rank; no process group needed)."""
    shared = _models.get(model)
    if shared is not None:
        shared.close()
