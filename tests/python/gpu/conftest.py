"""GPU tests run under torchrun, one process per GPU:

    torchrun --nproc-per-node=<GPUs> -m pytest tests/python/gpu -x -q

Every rank runs every test. After each test the ranks agree on the outcome over a gloo
(CPU) group, so a rank that fails makes every rank fail that test instead of leaving the
others waiting in a collective; a rank that cannot reach that agreement within
AGREE_TIMEOUT fails too, never hangs. A test that runs longer than TEST_TIMEOUT_S
(MOE_A2A_TEST_TIMEOUT_S, default 150) is a hang: every rank's watchdog prints
"GPU TEST TIMEOUT <test> on rank <r>" and the stacks of its threads, and ends the process, which
ends the torchrun (a rank stuck in an NCCL collective cannot be woken to run the next test).
Tests meet with `meet()` (a gloo barrier that raises after MEET_TIMEOUT) rather than
dist.barrier(), and put the meeting in a `finally` where one rank's check may fail before it.
With MOE_A2A_RESULTS_DIR set (tools/gpu_run.sh sets it), each failure's text is also written to
failures-rank<r>.txt there as soon as it is known, so that a run killed from outside keeps it.

MOE_A2A_TEST_ONE_GPU=1 runs every rank on GPU 0 (a correctness smoke run where only one GPU
is at hand: the ranks' kernels share the GPU, by time slices or under MPS, so every timing is
meaningless; the process group is gloo, since NCCL refuses two ranks on one GPU, and the few
tests that need NCCL collectives on GPU tensors fail there).
"""

import datetime
import faulthandler
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import moe_a2a  # noqa: E402,F401  (first: sets the no-multicast environment before torch loads)
from moe_a2a._collective import all_gather  # noqa: E402

AGREE_TIMEOUT = datetime.timedelta(seconds=180)
MEET_TIMEOUT = datetime.timedelta(seconds=60)
TEST_TIMEOUT_S = float(os.environ.get("MOE_A2A_TEST_TIMEOUT_S", "150"))
ONE_GPU = os.environ.get("MOE_A2A_TEST_ONE_GPU") == "1"
_cpu_group = None


def _init():
    global _cpu_group
    if dist.is_initialized():
        return
    if "RANK" not in os.environ:
        pytest.exit("GPU tests must run under torchrun: torchrun --nproc-per-node=<GPUs> -m pytest tests/python/gpu", 2)
    from hooks import BUILD_WITH_HOOKS

    from moe_a2a._ext import ext

    if not ext().TEST_HOOKS:  # every rank stops here alike: no rank is left waiting
        pytest.exit(f"the GPU tests need moe_a2a._C built with its test hooks: {BUILD_WITH_HOOKS}", 2)
    timeout = datetime.timedelta(seconds=300)
    if ONE_GPU:
        torch.cuda.set_device(0)
        dist.init_process_group("gloo", timeout=timeout)
    else:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local), timeout=timeout)
    _cpu_group = dist.new_group(backend="gloo", timeout=AGREE_TIMEOUT)


def pytest_configure(config):
    _init()


@pytest.fixture(scope="session")
def one_gpu():
    """True in the one-GPU smoke run (see the module docstring): latencies are time slices."""
    return ONE_GPU


@pytest.fixture(scope="session")
def world():
    return dist.get_world_size()


@pytest.fixture(scope="session")
def rank():
    return dist.get_rank()


def meet():
    """Every rank reaches this point: a barrier over the gloo group that raises (naming the ranks
    that did not come) after MEET_TIMEOUT instead of waiting for good, as an NCCL barrier would
    behind a rank that failed before it."""
    dist.monitored_barrier(group=_cpu_group, timeout=MEET_TIMEOUT, wait_all_ranks=True)


def gather(obj):
    """Every rank's `obj`, in rank order, on every rank, over the gloo group; raises after
    AGREE_TIMEOUT if a rank does not come."""
    return all_gather(obj, _cpu_group)


def share(obj):
    """Rank 0's `obj`, on every rank, over the gloo group: for a test whose work runs on rank 0
    alone (processes of its own on every GPU) while the other ranks wait without an NCCL
    collective on their GPU. Raises after AGREE_TIMEOUT if a rank does not come."""
    return all_gather(obj, _cpu_group)[0]


def _timed_out(nodeid):
    """The watchdog of a test that outran TEST_TIMEOUT_S: name it, show where every thread is,
    leave. The pause lets the other ranks' watchdogs, started at the same test, print theirs
    before torchrun ends them."""
    rank = dist.get_rank() if dist.is_initialized() else -1
    print(f"\nGPU TEST TIMEOUT {nodeid} on rank {rank} after {TEST_TIMEOUT_S:.0f} s", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    results = os.environ.get("MOE_A2A_RESULTS_DIR")
    if results:
        with open(os.path.join(results, "timeouts.txt"), "a") as f:
            f.write(f"{nodeid} rank {rank}\n")
    time.sleep(5)
    os._exit(3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    watchdog = threading.Timer(TEST_TIMEOUT_S, _timed_out, args=(item.nodeid,))
    watchdog.daemon = True
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    outcome = yield
    failed_here = outcome.excinfo is not None and not issubclass(outcome.excinfo[0], pytest.skip.Exception)
    flags = torch.zeros(dist.get_world_size(), dtype=torch.int32)
    flags[dist.get_rank()] = int(failed_here)
    try:
        dist.all_reduce(flags, group=_cpu_group)
    except Exception as e:  # a rank died or is stuck: fail rather than wait
        raise AssertionError(f"ranks could not agree on the test outcome: {e}") from e
    failed = [r for r in range(flags.numel()) if flags[r]]
    if failed and not failed_here:
        outcome.force_exception(AssertionError(f"failed on rank(s) {failed} (passed on this rank)"))


def pytest_runtest_logreport(report):
    """With MOE_A2A_RESULTS_DIR set, each failure's text goes to failures-rank<r>.txt there the moment
    it is known: pytest prints them only at the session's end, which a run killed from outside
    never reaches (session 26's first suite run lost the message of a failure that way)."""
    results = os.environ.get("MOE_A2A_RESULTS_DIR")
    if not results or not report.failed:
        return
    rank = dist.get_rank() if dist.is_initialized() else -1
    with open(os.path.join(results, f"failures-rank{rank}.txt"), "a") as f:
        f.write(f"==== {report.nodeid} ({report.when}) on rank {rank}, {time.strftime('%H:%M:%S')}\n")
        f.write(report.longreprtext + "\n")
        for name, content in report.sections:  # captured output, e.g. a child process's stderr: its last 20 000 chars
            f.write(f"---- {name}\n{content[-20000:]}\n")


def pytest_sessionfinish(session, exitstatus):
    if dist.is_initialized():
        try:
            dist.barrier(group=_cpu_group)
        finally:
            dist.destroy_process_group()
