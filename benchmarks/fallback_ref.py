"""Stand-in for moe_a2a.reference, used only while that module does not exist yet.

Same signatures as the brief gives for moe_a2a.reference; the semantics are those of
ARCHITECTURE.md "Reference semantics". Token counts and random draws will differ from the
real generator, so numbers taken with this stand-in are not comparable across versions.
"""
import torch


def generate_rank_inputs(rank, world, num_experts, topk, hidden, max_num_tokens, dtype, seed,
                         device="cpu", num_tokens=None):
    g = torch.Generator().manual_seed(seed * 65537 + rank)
    if num_tokens is None:
        num_tokens = int(torch.randint(1, max_num_tokens + 1, (1,), generator=g))
    x = torch.randn(num_tokens, hidden, generator=g).to(dtype)
    # distinct experts per token: the first topk of a random permutation
    idx = torch.rand(num_tokens, num_experts, generator=g).argsort(dim=1)[:, :topk]
    w = torch.rand(num_tokens, topk, generator=g)
    w = w / w.sum(dim=1, keepdim=True)
    return x.to(device), idx.to(torch.int32).to(device), w.to(device)


def moe_reference(all_inputs, rank, num_experts, world):
    """out[t] = sum_k w[t,k] * (x[t] * (1 + owner(idx[t,k]))), the product rounded to the
    token dtype as the fake grouped GEMM would, the sum in fp32."""
    x, idx, w = all_inputs[rank]
    owner = idx.long() // (num_experts // world)
    y = (x.unsqueeze(1) * (1 + owner).unsqueeze(-1).to(x.dtype))       # [T, K, H]
    out = (y.float() * w.float().unsqueeze(-1)).sum(dim=1)
    return out.to(x.dtype)
