"""What the shared expert's overlap costs an eager forward (session 37, call 2): a block adding a
DeepSeek-V3-style shared MLP of its input (bench_hf_model's width: 2048 -> 1408 -> 2048, bf16, one
token) run 3000 times eagerly, with moe_a2a.integrations.shared_overlap installed and forced to
launch (as a capture would) against the plain block. Each
iteration's wall time (perf_counter over the loop, one synchronize at the end) is the host's
time when the GPU keeps up, so the difference is the hooks', the fork's and the join's host cost.
One GPU, no process group.
    PYTHONPATH=python python3 fork_join_host.py"""

import time

import torch

from moe_a2a.integrations import shared_overlap


class MLP(torch.nn.Module):
    def __init__(self, hidden=2048, inter=1408):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.up_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.shared_experts = MLP()

    def forward(self, x):
        y = x * 2.0  # stands for the router and the exchange
        return y + self.shared_experts(x)


def per_iteration_us(block, x, n=3000):
    for _ in range(50):
        block(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        block(x)
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return 1e6 * host / n, 1e6 * wall / n


def main():
    torch.manual_seed(0)
    x = torch.randn(1, 1, 2048, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        plain = Block().cuda().to(torch.bfloat16)
        overlapped = Block().cuda().to(torch.bfloat16)
        overlapped.load_state_dict(plain.state_dict())
        state = shared_overlap.overlap_shared_expert_(overlapped)
        state.confirmed = True
        shared_overlap.streams.capturing = lambda: True  # launch eagerly, as in a capture
        print(f"max |overlap - plain|: {(overlapped(x) - plain(x)).abs().max().item()}")
        for name, block in [("plain", plain), ("overlap", overlapped), ("plain", plain), ("overlap", overlapped)]:
            host, wall = per_iteration_us(block, x)
            print(f"{name:8s} host {host:6.1f} us/iter  wall {wall:6.1f} us/iter")
        print(f"early results used: {state.taken}")


if __name__ == "__main__":
    main()
