"""Lifetime independent of the process group (issue 14): each scenario runs in fresh worker
processes, one per rank (lifetime_worker.py), that create and destroy their own process group
on a port of their own; this test only starts them and checks that every one succeeded."""

import os
import subprocess
import sys

import pytest
import torch
from worker_procs import free_port, worker_env

from moe_a2a._collective import all_gather

WORKER = os.path.join(os.path.dirname(__file__), "lifetime_worker.py")
TIMEOUT_S = 150


@pytest.mark.parametrize("scenario", ["cycles", "peer_exits"])
def test_lifetime_scenario(scenario, rank, world):
    ports = all_gather((free_port(), free_port()) if rank == 0 else None, None)[0]
    device = torch.cuda.current_device()
    cmd = [sys.executable, WORKER, scenario, str(rank), str(world), str(ports[0]), str(ports[1]), str(device)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=worker_env())
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"rank {rank}: {scenario} did not finish in {TIMEOUT_S} s:\n{e.stdout}\n{e.stderr}")
    assert run.returncode == 0 and "ok" in run.stdout, (
        f"rank {rank}: {scenario} failed (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    )
