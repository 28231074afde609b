"""One process of the fault-injection cases (issue 14, item 4), started by test_faults.py.

    python fault_worker.py main CASE[,CASE...] RANK WORLD STORE_PORT DEVICE
    python fault_worker.py victim CASE RANK WORLD STORE_PORT DEVICE

The last rank is the faulty one, every other rank survives. Each case runs in a process group of
its own: init_process_group over a prefix of one TCPStore, which rank 0's `main` serves for the
whole run and which also carries the time of the fault (so that a survivor can time fault ->
error). A `main` runs its cases one after the other in one process, so every case after the first
also shows that a fresh AllToAll works in a process whose last one failed (after a kill: whose
peer died while mapped). In a kill case the last rank's `main` sits out; a `victim` process,
started ahead and waiting in init_process_group, takes its rank and dies.

Every process prints one line per case it took part in:
    FAULT_RESULT {"case", "what", "rank", "role", "ok", "problem", "error", "seconds"}
where ok is false (and problem says why) when a check failed; the process goes on to its next
case either way. A survivor's checks: the error comes in bounded time, names what happened (the
call, the rank it waited for), every later call says the AllToAll is unusable, the caller's
tensors and a guard heap next to the AllToAll's are unchanged, close() returns (warning about a
dead peer, and about nobody else) and a fresh AllToAll works afterwards.
"""

import datetime
import functools
import json
import os
import re
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import moe_a2a  # noqa: E402  (first: sets the no-multicast environment before torch loads)
from moe_a2a._ext import ext  # noqa: E402

E_PER_RANK, K, H, T = 4, 2, 256, 16  # T below any GPU's block count: one token group per block
OTHER_HIDDEN = 512  # hidden_mismatch: the faulty rank's AllToAll
TIMEOUT_S = 1.5  # AllToAll(timeout_s=): short, so that a case ends quickly, far above a healthy wait
CLOSE_TIMEOUT_S = 1.0
STORE_TIMEOUT = datetime.timedelta(seconds=240)  # a victim waits in init_process_group until its turn
VICTIM_EXIT_CODE = 17  # os._exit's code, so the test can tell it from a crash
GUARD_PATTERN = 0x5A5A5A5A
RESULT_TAG = "FAULT_RESULT "

DISPATCH_TIMEOUT = r"timed out in dispatch-recv waiting for rank {victim}'s"
COMBINE_TIMEOUT = r"timed out in combine-recv waiting for rank {victim}'s"
EITHER_TIMEOUT = r"timed out in (dispatch|combine)-recv waiting for rank {victim}'s"


# ---- one case's process group, AllToAll(s), and what its checks found ----


class Guard:
    """A symmetric heap made right before the all-to-all's, filled with a pattern: a stray write
    of a broken round, local or from a peer, into the wrong place shows up as a changed word."""

    def __init__(self, group):
        self.heap = moe_a2a.SymmetricHeap(group, 1 << 20)
        self.words = self.heap.alloc((1 << 18,), torch.int32)
        self.words.fill_(GUARD_PATTERN)

    def intact(self) -> bool:
        torch.cuda.synchronize()
        return bool((self.words == GUARD_PATTERN).all())


class Ctx:
    def __init__(self, case, rank, world, store, device):
        self.case, self.rank, self.world, self.device = case, rank, world, device
        self.victim = world - 1
        self.store = dist.PrefixStore(case.name, store)
        self.problems, self.error, self.seconds, self.fault_marked = [], None, None, False
        self.role = "faulty" if rank == self.victim else "survivor"
        self.kept = []  # (tensor, copy) of results returned before the fault
        dist.init_process_group(
            "gloo", store=dist.PrefixStore("pg", self.store), rank=rank, world_size=world, timeout=STORE_TIMEOUT
        )
        group = dist.group.WORLD
        self.guard = Guard(group)
        hiddens = [H] + ([OTHER_HIDDEN] if case.other_all_to_all else [])
        self.eps = [
            moe_a2a.AllToAll(group, E_PER_RANK * world, K, h, T, torch.float32, timeout_s=TIMEOUT_S, device=device)
            for h in hiddens
        ]

    def problem(self, what: str):
        self.problems.append(what)

    def report(self):
        line = dict(
            case=self.case.name,
            what=self.case.what.format(victim=self.victim),
            rank=self.rank,
            role=self.role,
            ok=not self.problems,
            problem="; ".join(self.problems)[:1500],
            error=None if self.error is None else self.error[:400],
            seconds=self.seconds,
        )
        print(RESULT_TAG + json.dumps(line), flush=True)

    def finish(self):
        """Checks that nothing was overwritten, then closes everything (the alive ranks agree on
        when over the store first) and destroys the group."""
        try:
            if not self.guard.intact():
                self.problem("the guard heap next to the all-to-all's changed")
            if not all(torch.equal(t, copy) for t, copy in self.kept):
                self.problem("a result returned before the fault changed afterwards")
        except Exception as e:  # a broken device: reported, and the ranks still close together
            self.problem(f"checking for stray writes: {type(e).__name__}: {e}")
        dead = self.victim if self.case.kill else None
        barrier(self.store, "closing", self.rank, [r for r in range(self.world) if r != dead])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for ep in self.eps:
                ep.close(CLOSE_TIMEOUT_S)
            self.guard.heap.close(CLOSE_TIMEOUT_S)
        dist.destroy_process_group()
        warned = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        if dead is None and warned:
            self.problem(f"close() warned though every peer was alive: {warned}")
        if dead is not None:
            heaps = len(self.eps) + 1
            naming = [m for m in warned if f"rank(s) [{dead}]" in m]
            if len(naming) != heaps:
                self.problem(f"expected {heaps} close() warnings naming the dead rank {dead}, got {warned}")


def barrier(store, name, rank, ranks):
    store.set(f"{name}/{rank}", "1")
    store.wait([f"{name}/{r}" for r in ranks], STORE_TIMEOUT)


def mark_fault(ctx) -> float:
    now = time.time()
    ctx.store.set("fault_at", repr(now))
    ctx.fault_marked = True
    return now


def fault_time(ctx) -> float:
    return float(ctx.store.get("fault_at"))  # blocks until the faulty rank has marked it


# ---- rounds ----


def inputs(ctx, seed, hidden=H):
    g = torch.Generator().manual_seed(seed * 131 + ctx.rank)
    x = torch.randn(T, hidden, generator=g)
    idx = torch.stack([torch.randperm(E_PER_RANK * ctx.world, generator=g)[:K] for _ in range(T)]).int()
    w = torch.rand(T, K, generator=g)
    return x.to(ctx.device), idx.to(ctx.device), w.to(ctx.device)


def checked_round(ctx, ep, seed, grad=False):
    """dispatch -> identity experts -> combine: out[t] = x[t] * sum_k w[t, k]. Keeps the output
    (and its copy), which no later round, failed or not, may touch."""
    x, idx, w = inputs(ctx, seed, ep.hidden_dim)
    xg = x.clone().requires_grad_(grad)
    d = ep.dispatch(xg, idx, w)
    out = ep.combine(d.expert_x * 1.0, d)
    ep.synchronize()
    torch.testing.assert_close(out.detach(), x * w.sum(-1, keepdim=True), rtol=1e-5, atol=1e-5)
    ctx.kept.append((out, out.detach().clone()))
    return out, d


def warm_up(ctx, rounds, ep=None):
    for i in range(rounds):
        checked_round(ctx, ep or ctx.eps[0], seed=i)


def expect_error(ctx, pattern, calls, since=None):
    """calls() must raise a RuntimeError whose message matches `pattern`: records the message and
    the time from the fault (`since`, or the faulty rank's mark) to the error."""
    try:
        calls()
    except Exception as e:  # any other kind is itself a finding
        raised = time.time()
        ctx.error = f"{type(e).__name__}: {e}".strip()
        ctx.seconds = round(raised - (fault_time(ctx) if since is None else since), 3)
        if not isinstance(e, RuntimeError) or not re.search(pattern, str(e)):
            ctx.problem(f"the error does not match {pattern!r}")
        return
    ctx.problem(f"no error was raised (expected one matching {pattern!r})")


def expect_unusable(ctx, ep, d, x, idx, w):
    """After a timeout the AllToAll refuses every call, saying why."""
    calls = {
        "dispatch": lambda: ep.dispatch(x, idx, w),
        "combine": lambda: ep.combine(d.expert_x, d),
        "synchronize": ep.synchronize,
    }
    for name, call in calls.items():
        try:
            call()
        except RuntimeError as e:
            if "unusable" not in str(e):
                ctx.problem(f"{name} after the error raised {str(e)[:200]!r}, not 'unusable'")
        else:
            ctx.problem(f"{name} after the error did not raise")


def failing_round(ctx, ep, pattern, x, idx, w, since=None):
    """dispatch -> combine -> synchronize as a caller writes it, expected to fail; then every
    later call must say the AllToAll is unusable."""
    d = None

    def round_():
        nonlocal d
        d = ep.dispatch(x, idx, w)
        ep.combine(d.expert_x, d)
        ep.synchronize()

    expect_error(ctx, pattern, round_, since)
    if d is not None:
        expect_unusable(ctx, ep, d, x, idx, w)


# ---- the survivors' side, one function for every case ----


def survive(ctx, warm=1, fail_in="round", wait_for_fault=False, pattern=DISPATCH_TIMEOUT):
    """warm checked rounds, then a round that must fail with `pattern` (in the whole round, or
    in combine after a dispatch that works); the caller's inputs must come out unchanged."""
    ep = ctx.eps[0]
    warm_up(ctx, warm)
    pattern = pattern.format(victim=ctx.victim)
    x, idx, w = inputs(ctx, seed=100)
    before = [t.clone() for t in (x, idx, w)]
    if wait_for_fault:  # the victim dies first, then this rank dispatches
        fault_time(ctx)
        time.sleep(0.2)
    if fail_in == "combine":
        d = ep.dispatch(x, idx, w)
        expect_error(ctx, pattern, lambda: (ep.combine(d.expert_x, d), ep.synchronize()))
        expect_unusable(ctx, ep, d, x, idx, w)
    else:
        failing_round(ctx, ep, pattern, x, idx, w)
    if not all(torch.equal(a, b) for a, b in zip((x, idx, w), before)):
        ctx.problem("the failed round changed its inputs")


# ---- the faulty rank's side ----


def die(ctx, how):
    """Ends this process the hard way: no close(), no destroy_process_group, no atexit."""
    ctx.role = "killed (SIGKILL)" if how == "sigkill" else "killed (os._exit)"
    ctx.report()
    mark_fault(ctx)
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(VICTIM_EXIT_CODE)


def kill_before(ctx, how):
    die(ctx, how)


def kill_during(ctx, how):
    warm_up(ctx, 1)
    ctx.eps[0].dispatch(*inputs(ctx, seed=100))
    ctx.eps[0].synchronize()  # its dispatch is over (it has every peer's rows): now between the two
    die(ctx, how)


def kill_in_dispatch(ctx, how):
    warm_up(ctx, 1)
    ctx.eps[0].dispatch(*inputs(ctx, seed=100))  # the survivors hold back: its kernel waits for them
    time.sleep(0.3)
    die(ctx, how)


def kill_after(ctx, how):
    warm_up(ctx, 1)
    die(ctx, how)


class ExpertFailure(Exception):
    pass


def experts_that_fail(d):
    raise ExpertFailure(f"injected failure in the experts, given {d.expert_x.shape[0]} rows")


def raise_between(ctx):
    warm_up(ctx, 1)
    d = ctx.eps[0].dispatch(*inputs(ctx, seed=100))
    ctx.role = "raised in its experts"
    try:
        experts_that_fail(d)
    except ExpertFailure as e:  # the application catches it and stops calling this AllToAll
        mark_fault(ctx)
        ctx.error, ctx.seconds = f"ExpertFailure: {e}", 0.0


def op_mismatch(ctx):
    ep = ctx.eps[0]
    out, d = checked_round(ctx, ep, seed=0)  # the warm-up round, as the others'
    ctx.role = "calls combine"
    # Refused on the host before any launch: that round was combined already.
    expect_error(
        ctx, r"dispatch #1, which was already combined", lambda: ep.combine(d.expert_x, d), since=mark_fault(ctx)
    )


def kind_mismatch(ctx):
    ep = ctx.eps[0]
    warm_up(ctx, 1)
    out, d = checked_round(ctx, ep, seed=1, grad=True)  # a forward round, like the others' second
    ctx.role = "runs backward"
    calls = r"(combine-backward|combine-send \(backward of dispatch\))"
    pattern = rf"timed out in {calls}.* waiting for rank \d+'s"
    expect_error(ctx, pattern, lambda: (out.sum().backward(), ep.synchronize()), since=mark_fault(ctx))
    expect_unusable(ctx, ep, d, *inputs(ctx, seed=2))


def hidden_mismatch(ctx):
    warm_up(ctx, 1)
    ctx.role = f"dispatches on hidden {OTHER_HIDDEN}"
    other = ctx.eps[1]
    since = mark_fault(ctx)
    failing_round(
        ctx, other, r"timed out in dispatch-recv waiting for rank \d+'s", *inputs(ctx, 100, OTHER_HIDDEN), since
    )


def dtype_mismatch(ctx):
    warm_up(ctx, 1)
    ctx.role = "passes float16 x"
    x, idx, w = inputs(ctx, seed=100)
    expect_error(ctx, r"x must be", lambda: ctx.eps[0].dispatch(x.half(), idx, w), since=mark_fault(ctx))


def rounds_mismatch(ctx):
    warm_up(ctx, 2)
    ctx.role = "stops after 2 rounds"
    mark_fault(ctx)


def recover(ctx):
    """Every rank alive: the fresh group and AllToAll of this case must just work."""
    ctx.role = "fresh AllToAll"
    warm_up(ctx, 1)
    out, d = checked_round(ctx, ctx.eps[0], seed=1, grad=True)
    out.sum().backward()
    ctx.eps[0].synchronize()


# ---- the cases ----


@dataclass(frozen=True)
class Case:
    name: str
    what: str  # {victim} is the faulty rank
    faulty: Callable
    survivor: Callable
    kill: Optional[str] = None  # "exit" (os._exit) or "sigkill"; the victim process dies
    other_all_to_all: bool = False  # a second AllToAll, of hidden OTHER_HIDDEN


def _cases():
    cases = []
    for how, verb in (("exit", "calls os._exit"), ("sigkill", "is SIGKILLed")):
        kill = functools.partial(Case, kill=how)
        cases += [
            kill(
                f"kill_before_{how}",
                f"rank {{victim}} {verb} after building its AllToAll, before any dispatch",
                functools.partial(kill_before, how=how),
                functools.partial(survive, warm=0),
            ),
            kill(
                f"kill_during_{how}",
                f"rank {{victim}} {verb} between its dispatch and its combine",
                functools.partial(kill_during, how=how),
                functools.partial(survive, fail_in="combine", pattern=COMBINE_TIMEOUT),
            ),
            kill(
                f"kill_in_dispatch_{how}",
                f"rank {{victim}} {verb} while its dispatch kernel waits for the others",
                functools.partial(kill_in_dispatch, how=how),
                functools.partial(survive, wait_for_fault=True, pattern=EITHER_TIMEOUT),
            ),
            kill(
                f"kill_after_{how}",
                f"rank {{victim}} {verb} after a complete round; the others start the next",
                functools.partial(kill_after, how=how),
                survive,
            ),
        ]
    cases += [
        Case(
            "raise_between",
            "rank {victim} raises in its experts between dispatch and combine and stops calling",
            raise_between,
            functools.partial(survive, fail_in="combine", pattern=COMBINE_TIMEOUT),
        ),
        Case("op_mismatch", "rank {victim} calls combine while the others call dispatch", op_mismatch, survive),
        Case(
            "kind_mismatch",
            "rank {victim} runs a backward round while the others dispatch",
            kind_mismatch,
            functools.partial(survive, warm=2),
        ),
        Case(
            "hidden_mismatch",
            f"rank {{victim}} dispatches on an AllToAll of hidden {OTHER_HIDDEN}, the others on one of {H}",
            hidden_mismatch,
            survive,
            other_all_to_all=True,
        ),
        Case("dtype_mismatch", "rank {victim} passes float16 tokens to a float32 AllToAll", dtype_mismatch, survive),
        Case(
            "rounds_mismatch",
            "rank {victim} stops after 2 rounds, the others start a third",
            rounds_mismatch,
            functools.partial(survive, warm=2),
        ),
        Case("recover_after_kills", "a fresh group and AllToAll after the kills above", recover, recover),
        Case("recover_after_errors", "a fresh group and AllToAll after the errors above", recover, recover),
    ]
    return {c.name: c for c in cases}


CASES = _cases()
# Two lanes run side by side, each in processes of its own: cases in a lane run one after the
# other. By default each way of dying is tried at two of the four points (MOE_A2A_FAULT_CASES=all:
# both ways at every point).
_KILLS_DEFAULT = ["kill_before_exit", "kill_during_sigkill", "kill_in_dispatch_sigkill", "kill_after_exit"]
_KILLS_ALL = [n for n in CASES if n.startswith("kill_")]
_ERRORS = ["raise_between", "op_mismatch", "kind_mismatch", "hidden_mismatch", "dtype_mismatch", "rounds_mismatch"]


def lanes(selection: str = "default") -> dict:
    kills = _KILLS_ALL if selection == "all" else _KILLS_DEFAULT
    return {"kills": kills + ["recover_after_kills"], "errors": _ERRORS + ["recover_after_errors"]}


# ---- processes ----


def run_case(case, rank, world, store, device, victim_process=False):
    try:
        ctx = Ctx(case, rank, world, store, device)
    except Exception as e:  # reported, and the run goes on
        print(RESULT_TAG + json.dumps(dict(case=case.name, rank=rank, role="?", ok=False, problem=f"setup: {e}")))
        if dist.is_initialized():
            dist.destroy_process_group()  # so that the next case can make its own
        return
    faulty = rank == ctx.victim
    try:
        (case.faulty if faulty else case.survivor)(ctx)
    except Exception as e:  # reported, and the run goes on
        ctx.problem(f"unexpected {type(e).__name__}: {e}")
    if victim_process:  # the case did not kill it (a check failed first): die anyway, so nobody waits
        die(ctx, "exit")
    try:
        if faulty and not ctx.fault_marked:
            mark_fault(ctx)  # the survivors wait for it
        ctx.finish()
    except Exception as e:  # reported, and the run goes on
        ctx.problem(f"closing: {type(e).__name__}: {e}")
        if dist.is_initialized():
            dist.destroy_process_group()
    if ext().live_heaps() or ext().open_mappings():  # every heap of the case closed, dead peers' unmapped
        ctx.problem(f"after close: {ext().live_heaps()} live heaps, {ext().open_mappings()} open mappings")
    ctx.report()


def open_store(rank, port):
    return dist.TCPStore("127.0.0.1", port, None, is_master=rank == 0, timeout=STORE_TIMEOUT, wait_for_workers=False)


def main():
    role, names, rank, world, port, device = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
    torch.cuda.set_device(device)
    device = torch.device("cuda", device)
    torch.empty(1, device=device)  # a victim pays CUDA's start-up while it waits for its turn
    store = open_store(rank, port)
    if role == "victim":
        run_case(CASES[names], rank, world, store, device, victim_process=True)
        return
    for name in names.split(","):
        case = CASES[name]
        if case.kill and rank == world - 1:
            continue  # a victim process takes this rank
        run_case(case, rank, world, store, device)
    # Rank 0 serves the store: it leaves last, once every other main has said it is done with it.
    store.set(f"end/{rank}", "1")
    if rank == 0:
        store.wait([f"end/{r}" for r in range(world)], STORE_TIMEOUT)


if __name__ == "__main__":
    main()
