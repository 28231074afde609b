import os, sys, torch, torch.distributed as dist
sys.path.insert(0, "python")
local = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
import moe_a2a
from moe_a2a._ext import ext
world, rank = dist.get_world_size(), dist.get_rank()
E, K, H, T = 64, 6, 2048, 8
ep = moe_a2a.AllToAll(dist.group.WORLD, E, K, H, T, torch.bfloat16)
dev = torch.device("cuda", local)
idx = torch.zeros(T, K, dtype=torch.int32, device=dev); w = torch.zeros(T, K, device=dev)
def attempt(name, fn):
    print(rank, "try", name, flush=True)
    try:
        fn(); print(rank, "NO RAISE", name, flush=True)
    except Exception as e:
        print(rank, "raised", type(e).__name__, str(e).splitlines()[0][:120], flush=True)
attempt("pybind engine_check bad id", lambda: ext().engine_check(12345))
attempt("op bad engine id", lambda: torch.ops.moe_a2a.dispatch_send(12345, ep._state, torch.zeros(T, H, dtype=torch.bfloat16, device=dev), idx, w))
attempt("x 1-D", lambda: torch.ops.moe_a2a.dispatch_send(ep._engine, ep._state, torch.zeros(H, dtype=torch.bfloat16, device=dev), idx, w))
attempt("x 2040", lambda: torch.ops.moe_a2a.dispatch_send(ep._engine, ep._state, torch.zeros(T, 2040, dtype=torch.bfloat16, device=dev), idx, w))
attempt("x too many", lambda: torch.ops.moe_a2a.dispatch_send(ep._engine, ep._state, torch.zeros(T + 1, H, dtype=torch.bfloat16, device=dev), idx, w))
attempt("idx wrong", lambda: torch.ops.moe_a2a.dispatch_send(ep._engine, ep._state, torch.zeros(T, H, dtype=torch.bfloat16, device=dev), idx[:, :2].contiguous(), w))
ep.close(); dist.destroy_process_group()
