"""Fault injection (issue 14, item 4): a rank killed (SIGKILL, os._exit) before, during and after a
dispatch, a rank that raises between dispatch and combine, ranks that call different operations,
disagree on hidden size, dtype or the number of rounds. Every surviving rank must end in bounded
time with an error that names what happened, find its AllToAll unusable afterwards, close it, and
make a fresh one that works.

The cases run in worker processes of their own (fault_worker.py; torchrun's agent would tear down
the survivors of a killed rank itself): on every rank one `main` per lane, running the lane's
cases one after the other, and on the last rank one `victim` process per kill case, started
ahead. This test only starts them, collects their FAULT_RESULT lines and checks them. With -s,
rank 0 prints the table of cases and fault -> error times; with MOE_A2A_RESULTS_DIR set it also
writes faults.txt and faults.json there. MOE_A2A_FAULT_CASES=all tries both ways of dying at
every point (default: each at two of the four).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import fault_worker as fw
import pytest
import torch
from worker_procs import free_port, worker_env

from moe_a2a._collective import all_gather

WORKER = os.path.join(os.path.dirname(__file__), "fault_worker.py")
RUN_TIMEOUT_S = 300
# Fault -> error within one timeout and change: the first wait that times out marks the engine,
# and the waits of the kernels queued behind it give up at once (without that mark a fault at
# dispatch cost two timeouts, 3.0 s, and a backward round three).
MAX_FAULT_TO_ERROR_S = 2 * fw.TIMEOUT_S - 0.25
LANES = fw.lanes(os.environ.get("MOE_A2A_FAULT_CASES", "default"))
CASE_NAMES = [name for cases in LANES.values() for name in cases]


class Worker:
    def __init__(self, args, expect_rc):
        self.args, self.expect_rc = args, expect_rc
        self.out = tempfile.TemporaryFile(mode="w+")  # files, not pipes: nobody blocks on a full pipe
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, *map(str, args)], stdout=self.out, stderr=subprocess.STDOUT, env=worker_env()
        )

    def finish(self, deadline):
        """Waits until the deadline; returns (result lines, problem or None)."""
        try:
            rc = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        results = [
            json.loads(line[len(fw.RESULT_TAG) :]) for line in text.splitlines() if line.startswith(fw.RESULT_TAG)
        ]
        problem = None
        if rc is None:
            problem = f"did not finish in {RUN_TIMEOUT_S} s"
        elif rc != self.expect_rc:
            problem = f"exited with {rc}, expected {self.expect_rc}"
        if problem:
            problem = f"{' '.join(map(str, self.args[:2]))}: {problem}\n{text[-4000:]}"
        return results, problem


@pytest.fixture(scope="module")
def fault_run(rank, world):
    """Runs every lane once; every rank gets every rank's results. Never raises: a broken run
    shows up as problems (the collectives here must run on every rank)."""
    ports = all_gather([free_port() for _ in LANES] if rank == 0 else None, None)[0]
    device = torch.cuda.current_device()
    victim = world - 1
    workers = []
    for (lane, cases), port in zip(LANES.items(), ports):
        workers.append(Worker(["main", ",".join(cases), rank, world, port, device], 0))
        for name in cases if rank == victim else []:
            how = fw.CASES[name].kill
            if how:
                workers.append(Worker(["victim", name, rank, world, port, device], -9 if how == "sigkill" else 17))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    results, problems = [], []
    for w in workers:
        lines, problem = w.finish(deadline)
        results += lines
        problems += [problem] if problem else []
    gathered = all_gather((results, problems), None)
    return {
        "results": [r for rank_results, _ in gathered for r in rank_results],
        "problems": {r: p for r, (_, p) in enumerate(gathered)},
    }


def test_fault_workers_ran(fault_run, rank):
    assert not fault_run["problems"][rank], "\n".join(fault_run["problems"][rank])


@pytest.mark.parametrize("case", CASE_NAMES)
def test_fault_case(case, fault_run, rank):
    mine = [r for r in fault_run["results"] if r["case"] == case and r["rank"] == rank]
    assert mine, f"rank {rank} reported nothing for {case} (see test_fault_workers_ran)"
    for r in mine:
        assert r["ok"], f"rank {rank} ({r['role']}): {r['problem']}\nerror: {r.get('error')}"
        if r["role"] == "survivor":
            assert r["error"] and r["seconds"] is not None, f"rank {rank} survived {case} without an error"
        if r.get("seconds") is not None:
            assert r["seconds"] < MAX_FAULT_TO_ERROR_S, f"fault -> error took {r['seconds']} s"


def table(results) -> str:
    order = {name: i for i, name in enumerate(CASE_NAMES)}
    rows = sorted(results, key=lambda r: (order.get(r["case"], len(order)), r["rank"]))
    lines = [
        "| case | what happens | rank | role | error (start) | fault -> error (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        error = (r.get("error") or "-").replace("|", "/").replace("\n", " ")[:110]
        seconds = "-" if r.get("seconds") is None else f"{r['seconds']:.2f}"
        status = "" if r["ok"] else " **FAILED**"
        lines.append(f"| {r['case']}{status} | {r.get('what', '')} | {r['rank']} | {r['role']} | {error} | {seconds} |")
    return "\n".join(lines)


def test_fault_report(fault_run, rank, world, one_gpu):
    """Rank 0 prints (with -s) and saves the table; always passes."""
    if rank != 0:
        return
    setting = f"{world} ranks sharing one GPU" if one_gpu else f"{world} GPUs"
    text = f"fault injection, world {world} ({setting}), AllToAll timeout_s = {fw.TIMEOUT_S}\n" + table(
        fault_run["results"]
    )
    print("\n" + text)
    out = os.environ.get("MOE_A2A_RESULTS_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "faults.txt"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(out, "faults.json"), "w") as f:
            json.dump(fault_run["results"], f, indent=1)
