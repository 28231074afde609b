"""Lifetime independent of the process group (issue 14): each scenario runs in fresh worker
processes, one per rank (lifetime_worker.py), that create and destroy their own process group
on a port of their own; this test only starts them and checks that every one succeeded."""

import os
import socket
import subprocess
import sys

import pytest
import torch

from moe_a2a._collective import all_gather

WORKER = os.path.join(os.path.dirname(__file__), "lifetime_worker.py")
TIMEOUT_S = 150


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env() -> dict:
    """This process's environment without what torchrun set for it: under torchrun,
    TORCHELASTIC_USE_AGENT_STORE makes init_process_group a client of torchrun's store, and the
    workers must run their own."""
    launcher = {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "ROLE_NAME",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
    return {k: v for k, v in os.environ.items() if k not in launcher and not k.startswith("TORCHELASTIC_")}


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
