"""A pool of reused worker processes, as gpu-mode's challenge harness runs submissions (issue 36,
item 2).

The harness starts N worker processes once (multiprocessing, spawn) and runs every test case in
them: in each case every worker joins a fresh default process group on the same fixed port, as
rank r on GPU r (NCCL, device_id=cuda:r), runs the user's code and destroys the group; a worker
that was rank 0 on GPU 0 in one case is rank 1 on GPU 1 in the next. A submission caches one
AllToAll per config across the calls of a case; when the case's group is gone it close()s the old
one (close() needs no process group) and builds a new one on its GPU (docs/usage.md, "Current device").
That takes three things of the library: destroy_process_group frees the port although an
AllToAll lives on (it holds its group weakly), a stale AllToAll closes without a group, and no call
depends on or changes the caller's current device (a worker has the last case's GPU current: the
original bug was "Tensor found on device cuda:0 but backend constrained to cuda:1" in
AllToAll()'s handshake).

Here torchrun's rank 0 runs such a pool of `world` workers (pool_worker.py) through max(10, 2 x
world) cases, each giving every worker another rank than the last (rotations, then reversed
ones), odd cases making the case's GPU current first and even ones leaving the last case's GPU
current. Each case runs rounds checked against moe_a2a.reference, fused and split, on two configs
(2-3 rounds, one config or both at once; every kind on both in the first rotation). A case starts
only when every worker has reported the last one, as a pool's starmap would. After the first
rotation (every worker has then been every rank, on every GPU: NCCL, the kernels and the allocator
are warm) and at the end the used memory of every GPU is taken; at the end every worker's heaps and
IPC mappings are closed and no GPU may hold 64 MiB more than after the rotation. The other
torchrun ranks wait over the gloo group without touching their GPU and fail with rank 0's message.
With MOE_A2A_TEST_ONE_GPU=1 every worker runs on GPU 0 over gloo (NCCL refuses two ranks on one
GPU).

    torchrun --nproc-per-node=<GPUs> -m pytest tests/python/gpu/test_reused_workers.py -q
"""

import multiprocessing
import os
import queue
import signal
import tempfile
import time
import traceback

import pool_worker
from conftest import ONE_GPU, share
from worker_procs import free_port

MIN_CASES = 10
# From spawning the workers (each imports torch once) to the last check; with EXIT_S and twice END_S
# under conftest's watchdog (150 s), so that a hang fails here, naming its case, and the workers end.
BUDGET_S = 110.0
EXIT_S = 15.0  # for the workers to exit when asked
END_S = 5.0  # for them to end when terminated, then when killed
GRACE_S = 5.0  # for the others' replies once a worker has died in a case
STACKS_S = 1.0  # for a busy worker to write its stacks when asked
GROWTH_MIB = 64  # the used memory of a GPU may grow this much after the first rotation (lifetime_worker.py)


class Pool:
    """The harness's pool: `n` spawned workers, a task queue each (so that the test picks every
    case's worker -> rank mapping), one result queue, and a file each for its stacks."""

    def __init__(self, n, gpus):
        ctx = multiprocessing.get_context("spawn")
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(n)]
        self.stacks_dir = tempfile.TemporaryDirectory(prefix="moe_a2a_pool_")
        self.stacks = [os.path.join(self.stacks_dir.name, f"stacks-{w}.txt") for w in range(n)]
        self.procs = [
            ctx.Process(
                target=pool_worker.serve,
                args=(w, gpus, self.tasks[w], self.results, self.stacks[w]),
                name=f"pool-{w}",
                daemon=True,
            )
            for w in range(n)
        ]
        for proc in self.procs:
            proc.start()

    def ask(self, tasks, deadline):
        """Sends {worker: task}; returns {worker: reply} of those that replied by the deadline, or
        within GRACE_S once a worker asked has exited (the others' errors then say what they saw)."""
        for w, task in tasks.items():
            self.tasks[w].put(task)
        replies = {}
        while len(replies) < len(tasks) and time.monotonic() < deadline:
            try:
                reply = self.results.get(timeout=min(1.0, max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                if any(not self.procs[w].is_alive() for w in tasks if w not in replies):
                    deadline = min(deadline, time.monotonic() + GRACE_S)
                continue
            if reply["worker"] in tasks:
                replies[reply["worker"]] = reply
        return replies

    def stacks_of(self, busy):
        """{worker: every thread's Python stack} of the busy workers still alive (SIGUSR1, pool_worker):
        where a case that never replied is stuck (session 26 lost one such failure without it)."""
        alive = [w for w in busy if self.procs[w].is_alive()]
        for w in alive:
            os.kill(self.procs[w].pid, signal.SIGUSR1)
        time.sleep(STACKS_S if alive else 0.0)
        out = {}
        for w in alive:
            with open(self.stacks[w]) as f:
                out[w] = f.read().strip() or "(no stack written)"
        return out

    def stop(self, deadline):
        """Asks every worker to exit; returns those that did not by the deadline."""
        for q in self.tasks:
            q.put({"kind": "exit"})
        for proc in self.procs:
            proc.join(timeout=max(0.1, deadline - time.monotonic()))
        return [w for w, proc in enumerate(self.procs) if proc.is_alive()]

    def end(self):
        """Ends every worker still alive (after a failure): none may outlive the test."""
        for signal_them in ("terminate", "kill"):
            for proc in self.procs:
                if proc.is_alive():
                    getattr(proc, signal_them)()
            deadline = time.monotonic() + END_S
            for proc in self.procs:
                proc.join(timeout=max(0.1, deadline - time.monotonic()))
        for q in [*self.tasks, self.results]:
            q.cancel_join_thread()  # tasks nobody will read must not hold up this process's exit
            q.close()
        self.stacks_dir.cleanup()


def mappings(n, count):
    """Each case's rank of every worker: first a rotation (worker w is rank (w + i) % n in case i),
    after which every worker has been every rank, then reversed and plain rotations by turns; never
    the same mapping twice in a row (at n = 2 the two ranks swap every case)."""
    out = [[(w + i) % n for w in range(n)] for i in range(n)]
    i = 0
    while len(out) < count:
        i += 1
        ranks = [(i - w) % n for w in range(n)] if i % 2 else [(w + i) % n for w in range(n)]
        if ranks != out[-1]:
            out.append(ranks)
    return out


def rounds(case, warm_up):
    """The case's (config, split) rounds. In the first rotation every kind of round on both configs:
    every worker then has every kernel loaded on every GPU before the memory is first taken. Later
    the case's config fused, then split; every third case a second config in between, so that two
    AllToAlls are cached at once (and both are stale in the next case)."""
    names = sorted(pool_worker.CONFIGS)
    if warm_up:
        return [(name, split) for split in (False, True) for name in names]
    main, other = names[(case // 2) % 2], names[1 - (case // 2) % 2]
    if case % 3 == 2:
        return [(main, False), (other, True), (main, True)]
    return [(main, False), (main, True)]


def case_task(case, rank, world, port, backend, gpus):
    return dict(
        kind="case",
        case=case,
        rank=rank,
        world=world,
        port=port,
        backend=backend,
        gpu=gpus[rank % len(gpus)],  # GPU r, or GPU 0 for every rank in the one-GPU run
        seed=case + 1,
        set_device=case % 2 == 1,
        rounds=rounds(case, warm_up=case < world),
    )


class PoolFailure(Exception):
    """A task of the pool failed: the message names it and holds every worker's error."""


def diagnosis(text):
    """What a known failure of this pattern means, when a worker's error is one of them."""
    if "EADDRINUSE" in text or "address already in use" in text.lower():
        return "[the port was still taken: a group of the last case outlived destroy_process_group]\n"
    if "backend constrained to" in text or "found on device" in text:
        return "[a collective ran on another GPU than its group's: the caller's current device leaked in]\n"
    return ""


def ask_all(pool, what, tasks, deadline):
    """pool.ask; {worker: info} when every worker succeeded, else PoolFailure naming `what` and
    every failed or missing reply."""
    replies = pool.ask(tasks, deadline)
    stacks = pool.stacks_of([w for w in tasks if w not in replies])
    problems = []
    for w, task in tasks.items():
        where = f"worker {w}" + (f" (rank {task['rank']}, GPU {task['gpu']})" if task["kind"] == "case" else "")
        reply = replies.get(w)
        if reply is None:
            code = pool.procs[w].exitcode
            why = "(still busy when the test gave up)" if code is None else f"(it exited with {code})"
            stack = f"; its threads' stacks:\n{stacks[w]}" if w in stacks else ""
            problems.append(f"{where}: no reply {why}{stack}")
        elif (reply["kind"], reply["case"]) != (task["kind"], task.get("case")):
            problems.append(f"{where}: replied to {reply['kind']} {reply['case']} instead")
        elif not reply["ok"]:
            problems.append(f"{where}:\n{diagnosis(reply['error'])}{reply['error']}")
    if problems:
        raise PoolFailure(f"{what} failed:\n" + "\n".join(problems))
    return {w: reply["info"] for w, reply in replies.items()}


def snapshot(pool, world, close, deadline):
    """({worker: live heaps and open mappings}, {GPU: used MiB}). Every worker settles first (frees
    what torch caches; with close, closes its AllToAlls), then one reads every GPU: mem_get_info
    counts every process, so it reads only once none is still freeing."""
    settle = {w: {"kind": "settle", "close": close} for w in range(world)}
    heaps = ask_all(pool, f"settle (close={close})", settle, deadline)
    used = ask_all(pool, "memory", {0: {"kind": "memory"}}, deadline)[0]
    return heaps, used


def run_cases(pool, world, gpus, backend, deadline):
    port = free_port()  # every case's group on this one port, as the harness's
    warm = None
    foreign = 0  # worker-cases that ran with another GPU current than the case's
    for case, ranks in enumerate(mappings(world, max(MIN_CASES, 2 * world))):
        tasks = {w: case_task(case, ranks[w], world, port, backend, gpus) for w in range(world)}
        infos = ask_all(pool, f"case {case} (worker -> rank {ranks}, {backend}, port {port})", tasks, deadline)
        foreign += sum(info["current"] != info["gpu"] for info in infos.values())
        if case == world - 1:  # the first rotation is done: every worker has been on every GPU
            warm = snapshot(pool, world, False, deadline)[1]
    heaps, used = snapshot(pool, world, True, deadline)
    leaks = {w: h for w, h in heaps.items() if h["live heaps"] or h["open mappings"]}
    assert not leaks, f"workers hold heaps or IPC mappings after closing every AllToAll: {leaks}"
    grown = {gpu: round(used[gpu] - warm[gpu]) for gpu in gpus}
    assert max(grown.values()) < GROWTH_MIB, f"used memory grew after the first rotation (MiB per GPU): {grown}"
    assert len(gpus) == 1 or foreign, "no case ran with another GPU current than its own: the test missed its point"


def run_pool(world):
    """Runs the pool through every case; None, or what went wrong. Never raises: every rank must
    get to share()."""
    gpus = [0] if ONE_GPU else list(range(world))
    backend = "gloo" if ONE_GPU else "nccl"
    deadline = time.monotonic() + BUDGET_S
    pool = None
    try:
        pool = Pool(world, gpus)
        run_cases(pool, world, gpus, backend, deadline)
        stuck = pool.stop(time.monotonic() + EXIT_S)
        return f"workers {stuck} did not exit within {EXIT_S:.0f} s of being asked" if stuck else None
    except (PoolFailure, AssertionError) as e:
        return str(e)
    except Exception:
        return traceback.format_exc()
    finally:
        if pool is not None:
            pool.end()


def test_reused_worker_pool(rank, world):
    # Only rank 0 runs the pool (on every rank's GPU); the others wait over gloo, off their GPU.
    failure = share(run_pool(world) if rank == 0 else None)
    assert failure is None, failure
