"""One worker of test_reused_workers.py's pool, in a process of its own (multiprocessing, spawn), as
gpu-mode's challenge harness runs them: the same process serves case after case, as another rank on
another GPU each time, each case in a fresh default process group on the same port.

`serve` takes tasks from its own queue and puts one reply per task on the shared result queue:

case:   join the case's group (rank, GPU, port, backend), run its rounds through `Submission` (a
        user's code: AllToAlls cached across calls, rebuilt when the group is gone), check each
        round against moe_a2a.reference, destroy the group.
settle: optionally close every cached AllToAll; collect garbage, wait for and empty every GPU;
        reply with this process's live heaps and open IPC mappings.
memory: the used memory of every GPU (every process's: the test asks one worker once all settled).
exit:   return (the process ends).

A failure never ends the worker silently: it is the reply, with its traceback. A worker that does not
reply (stuck in a case) writes every thread's Python stack to its `stacks` file on SIGUSR1, which the
test sends before it gives up and quotes in its failure.
"""

import faulthandler
import gc
import multiprocessing
import os
import queue
import signal
import sys
import threading
import traceback
import warnings
from datetime import timedelta
from typing import NamedTuple

_PYTHON = os.path.join(os.path.dirname(__file__), "..", "..", "..", "python")
if _PYTHON not in sys.path:  # the test process imports this module too, with the path already set
    sys.path.insert(0, _PYTHON)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from worker_procs import worker_env  # noqa: E402

import moe_a2a  # noqa: E402  (before anything initialises CUDA or NCCL: sets the no-multicast environment)
from moe_a2a import reference as ref  # noqa: E402
from moe_a2a._ext import ext  # noqa: E402

GROUP_TIMEOUT = timedelta(seconds=60)  # init_process_group and the setup collectives
MAX_IDLE_S = 300.0  # no task for this long: the test is stuck, stop


class Config(NamedTuple):
    """What a submission's AllToAll depends on: its cache key."""

    experts_per_rank: int
    topk: int
    hidden: int
    max_tokens: int
    dtype: torch.dtype


# Two configs, so the cache holds more than one kind of AllToAll (and two at once in some cases).
CONFIGS = {
    "bf16-h512": Config(4, 2, 512, 64, torch.bfloat16),
    "fp16-h256": Config(4, 2, 256, 64, torch.float16),
}


def on_current_group(ep):
    """Whether `ep` was made with the current default group. An AllToAll holds its group weakly, so
    `ep.group` raises once that group was destroyed; a group destroyed but not yet collected is
    simply not the current one."""
    try:
        return ep.group is dist.group.WORLD
    except RuntimeError:
        return False


class Submission:
    """A user's submission written as docs/usage.md advises for reused workers: one AllToAll per config,
    reused by every call of a case; at the first call of the next case (a new group) the old ones are
    closed (close() needs no process group) and rebuilt on this case's GPU. Counts its builds and
    closes so that the worker can check the cache did what it should."""

    def __init__(self):
        self.cache = {}  # Config -> AllToAll, in the order they were built (the same on every rank)
        self.built = self.closed = 0

    def drop_stale(self):
        # In insertion order: every rank closes its AllToAlls in the same order, and close() waits
        # for the peers' close of the same AllToAll.
        for cfg, ep in list(self.cache.items()):
            if not on_current_group(ep):
                ep.close()
                del self.cache[cfg]
                self.closed += 1

    def all_to_all(self, cfg, gpu):
        self.drop_stale()
        if cfg not in self.cache:
            num_experts = cfg.experts_per_rank * dist.get_world_size()
            self.cache[cfg] = moe_a2a.AllToAll(
                None, num_experts, cfg.topk, cfg.hidden, cfg.max_tokens, cfg.dtype, device=torch.device("cuda", gpu)
            )
            self.built += 1
        return self.cache[cfg]

    def __call__(self, cfg, gpu, x, idx, w, split):
        """One MoE layer's communication: dispatch, the experts, combine. Returns (dispatched, out)."""
        ep = self.all_to_all(cfg, gpu)
        x, idx, w = (t.to(ep.device) for t in (x, idx, w))
        if split:
            d = ep.dispatch_recv(ep.dispatch_send(x, idx, w))
            out = ep.combine_recv(ep.combine_send(ref.fake_grouped_gemm_reference(d.expert_x, ep.rank), d))
        else:
            d = ep.dispatch(x, idx, w)
            out = ep.combine(ref.fake_grouped_gemm_reference(d.expert_x, ep.rank), d)
        ep.synchronize()
        return d, out

    def close(self):
        for ep in self.cache.values():
            ep.close()
        self.cache.clear()


def forget_launcher():
    """Drops what torchrun set for the test process (inherited through spawn): with it,
    init_process_group would become a client of torchrun's store instead of running its own."""
    keep = worker_env()
    for var in [v for v in os.environ if v not in keep]:
        del os.environ[var]


def join_group(task):
    """The case's fresh default group, on the port every case uses."""
    backend, gpu = task["backend"], task["gpu"]
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{task['port']}",
        rank=task["rank"],
        world_size=task["world"],
        timeout=GROUP_TIMEOUT,
        device_id=torch.device("cuda", gpu) if backend == "nccl" else None,
    )


def checked_round(sub, cfg, task, seed, split, current):
    """One call of the submission, checked: the current device is still `current`, dispatch and
    combine agree with the reference (every rank derives every rank's inputs from the seed)."""
    rank, world = task["rank"], task["world"]
    E = cfg.experts_per_rank * world
    inputs = ref.generate_all_inputs(world, E, cfg.topk, cfg.hidden, cfg.max_tokens, cfg.dtype, seed=seed)
    d, out = sub(cfg, task["gpu"], *inputs[rank], split=split)
    now = torch.cuda.current_device()
    assert now == current, f"the submission's calls changed the current device from cuda:{current} to cuda:{now}"
    got = ref.canonical_dispatch(d.expert_x, d.expert_num_tokens, d.expert_meta, rank)
    ref.assert_dispatch_matches(got, ref.dispatch_reference(inputs, rank, E, world))
    want = ref.moe_reference(inputs, rank, E, world)
    torch.testing.assert_close(out.cpu().float(), want.float(), rtol=1e-2, atol=5e-3)


def run_rounds(sub, task, current):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n, (name, split) in enumerate(task["rounds"]):
            try:
                checked_round(sub, CONFIGS[name], task, task["seed"] * 16 + n, split, current)
            except Exception as e:
                raise AssertionError(f"round {n} ({name}, {'split' if split else 'fused'}): {e}") from e
    # A close that did not hear from its peers warns: the stale AllToAlls were not closed together.
    late = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning) and "moe_a2a" in str(w.message)]
    assert not late, f"moe_a2a warned: {late}"


def run_case(sub, task):
    """One case of the harness. Odd cases make their GPU current first, even ones leave whatever
    the last case left current (its GPU, in general another one): the AllToAll must work on its
    device= either way, and leave the current device alone."""
    if task["set_device"]:
        torch.cuda.set_device(task["gpu"])
    join_group(task)
    current = torch.cuda.current_device()
    stale, built, closed = len(sub.cache), sub.built, sub.closed
    run_rounds(sub, task, current)
    configs = len({name for name, _ in task["rounds"]})
    assert sub.closed - closed == stale, f"closed {sub.closed - closed} stale AllToAlls of the last case, not {stale}"
    assert sub.built - built == configs == len(sub.cache), (
        f"built {sub.built - built} AllToAlls for {configs} configs, {len(sub.cache)} cached"
    )
    dist.destroy_process_group()  # the cached AllToAlls outlive it; the next case's first call closes them
    return {"current": current, "gpu": task["gpu"], "closed": sub.closed - closed, "built": sub.built - built}


def settle(sub, task, gpus):
    if task["close"]:
        sub.close()
    gc.collect()
    for gpu in gpus:
        torch.cuda.synchronize(gpu)
        with torch.cuda.device(gpu):
            torch.cuda.empty_cache()
    return {"live heaps": ext().live_heaps(), "open mappings": ext().open_mappings()}


def memory(gpus):
    """MiB in use on each GPU, by every process (mem_get_info is the device's)."""
    used = {}
    for gpu in gpus:
        free, total = torch.cuda.mem_get_info(gpu)
        used[gpu] = (total - free) / 2**20
    return used


def handle(sub, task, gpus):
    kind = task["kind"]
    if kind == "case":
        return run_case(sub, task)
    if kind == "settle":
        return settle(sub, task, gpus)
    if kind == "memory":
        return memory(gpus)
    raise ValueError(f"unknown task {kind!r}")


def leave_group():
    """After a failed case: best effort, so that the error is reported and the worker lives on."""
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def exit_with_parent():
    """A worker never outlives the test process, not even one stuck in a case: conftest's watchdog
    ends a test that hangs with os._exit, which runs no cleanup that could end the pool."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=lambda: (parent.join(), os._exit(1)), name="exit-with-parent", daemon=True).start()


def next_task(tasks):
    """The next task, or None when the test sent none for MAX_IDLE_S (it is stuck: stop)."""
    try:
        return tasks.get(timeout=MAX_IDLE_S)
    except queue.Empty:
        return None


def serve(worker, gpus, tasks, results, stacks):
    """The worker process's body: tasks from `tasks`, one reply each on `results`; every thread's
    stack to the file `stacks` on SIGUSR1."""
    faulthandler.register(signal.SIGUSR1, file=open(stacks, "w"), all_threads=True)  # open for the process's life
    exit_with_parent()
    forget_launcher()
    sub = Submission()
    while True:
        task = next_task(tasks)
        if task is None or task["kind"] == "exit":
            return
        reply = {"worker": worker, "kind": task["kind"], "case": task.get("case")}
        try:
            reply.update(ok=True, info=handle(sub, task, gpus))
        except Exception:
            reply.update(ok=False, error=traceback.format_exc())
        results.put(reply)
        if not reply["ok"]:
            leave_group()
