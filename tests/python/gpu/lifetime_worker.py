"""One rank of a lifetime scenario, run by test_lifetime.py in a process of its own (so that it
can create and destroy its own default process group, and exit when the scenario says so).

    python lifetime_worker.py SCENARIO RANK WORLD PORT SIDE_PORT DEVICE

PORT is the process group's (the same in every cycle); SIDE_PORT a store of the scenario's own
that orders the cycles across ranks (a rank must not reach the next init_process_group while
rank 0 still serves the last group's store on PORT, or it would join that one).

cycles:     50 times on the same port: init_process_group -> AllToAll -> one checked round ->
            destroy_process_group, closing the AllToAll before the destroy, after it, or not at
            all (garbage collection); then no growth in live heaps, open IPC mappings, file
            descriptors or device memory.
peer_exits: one round, then every rank but 0 exits without closing anything; rank 0's close()
            must warn about them, free its memory and return within its timeout.
Prints "ok" and exits 0 on success; any failure raises (exit code 1)."""

import datetime
import gc
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import moe_a2a  # noqa: E402  (first: sets the no-multicast environment before torch loads)
from moe_a2a._ext import ext  # noqa: E402

E_PER_RANK, K, H, T = 4, 2, 1024, 256  # a heap of several MiB: a leak per cycle shows
CYCLES = 50
CLOSE_TIMEOUT_S = 3.0


TIMEOUT = datetime.timedelta(seconds=60)


def init(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=TIMEOUT)


class SideBarrier:
    """Barriers over a store that outlives every process group of the scenario."""

    def __init__(self, rank, world, port):
        self.store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=TIMEOUT)
        self.rank, self.world, self.n = rank, world, 0

    def __call__(self):
        self.n += 1
        self.store.set(f"barrier{self.n}/{self.rank}", "1")
        self.store.wait([f"barrier{self.n}/{r}" for r in range(self.world)])


def checked_round(ep, rank, world, seed):
    """dispatch -> identity experts -> combine: out[t] = x[t] * sum_k w[t, k]."""
    g = torch.Generator().manual_seed(seed * 131 + rank)
    x = torch.randn(T, H, generator=g).cuda()
    idx = torch.stack([torch.randperm(E_PER_RANK * world, generator=g)[:K] for _ in range(T)]).cuda()
    w = torch.rand(T, K, generator=g).cuda()
    d = ep.dispatch(x, idx, w)
    out = ep.combine(d.expert_x, d)
    ep.synchronize()
    torch.testing.assert_close(out, x * w.sum(-1, keepdim=True), rtol=1e-5, atol=1e-5)


def resources(device):
    gc.collect()
    torch.cuda.synchronize(device)
    free, _ = torch.cuda.mem_get_info(device)
    return {
        "live heaps": ext().live_heaps(),
        "open mappings": ext().open_mappings(),
        "file descriptors": len(os.listdir("/proc/self/fd")),
        "free MiB": free / 2**20,
    }


def new_all_to_all(world, device):
    return moe_a2a.AllToAll(dist.group.WORLD, E_PER_RANK * world, K, H, T, torch.float32, device=device)


def cycles(rank, world, port, side_port, device):
    side_barrier = SideBarrier(rank, world, side_port)
    before = None
    for i in range(CYCLES):
        side_barrier()  # every rank is done with the last group, so its store on `port` is gone
        init(rank, world, port)  # the same port every time: fails if anything kept the last group alive
        ep = new_all_to_all(world, device)
        checked_round(ep, rank, world, i)
        how = i % 3
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if how == 0:
                ep.close(CLOSE_TIMEOUT_S)
            dist.destroy_process_group()
            if how == 1:
                ep.close(CLOSE_TIMEOUT_S)  # after the group is gone
            del ep  # how == 2: closed by its finalizer, with no group
            gc.collect()
        late = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert not late, f"cycle {i}: a close did not hear from its peers: {late}"
        if i == 4:  # after the first cycles: allocator pools, gloo and CUDA state are warm
            before = resources(device)
    after = resources(device)
    print(f"rank {rank}: before {before}, after {after}")
    for key in ("live heaps", "open mappings"):
        assert after[key] == before[key] == 0, f"{key}: {before[key]} -> {after[key]}"
    assert after["file descriptors"] <= before["file descriptors"] + 2, "file descriptors grow"
    assert before["free MiB"] - after["free MiB"] < 64, "device memory is not given back"


def peer_exits(rank, world, port, side_port, device):
    del side_port  # one group only
    init(rank, world, port)
    ep = new_all_to_all(world, device)
    checked_round(ep, rank, world, 0)
    dist.barrier()
    if rank != 0:
        print("ok", flush=True)
        os._exit(0)  # no close(), no destroy: gone
    time.sleep(1.0)  # the peers are gone by now (or soon)
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ep.close(CLOSE_TIMEOUT_S)
    took = time.monotonic() - start
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any("without hearing from rank(s)" in m for m in messages), f"no warning about the missing peers: {messages}"
    assert took < CLOSE_TIMEOUT_S + 5, f"close() took {took:.1f} s"
    assert ext().live_heaps() == 0 and ext().open_mappings() == 0, "memory not freed after a peer was gone"
    print("ok", flush=True)
    os._exit(0)  # the group's peers are gone: skip its teardown


def main():
    scenario, rank, world, port, side_port, device = sys.argv[1], *map(int, sys.argv[2:7])
    torch.cuda.set_device(device)
    {"cycles": cycles, "peer_exits": peer_exits}[scenario](rank, world, port, side_port, torch.device("cuda", device))
    print("ok", flush=True)


if __name__ == "__main__":
    main()
