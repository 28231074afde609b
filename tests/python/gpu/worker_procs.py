"""For GPU tests that start worker processes of their own (test_lifetime.py, test_faults.py,
test_multinode.py): the workers create their own process groups, so they need a rendezvous (a
free port, or a fresh file) and an environment without what torchrun set for the test process."""

import os
import socket
import tempfile

from moe_a2a._collective import all_gather

# What torchrun sets for its ranks. Under torchrun, TORCHELASTIC_USE_AGENT_STORE makes
# init_process_group a client of torchrun's store, and the workers must run their own.
_LAUNCHER_VARS = {
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def file_rendezvous(rank: int) -> str:
    """An init_method for the workers' process group that needs no port: a fresh file that rank 0
    of the test names, the same for every rank. A port from free_port can be taken by another
    process between its check and the workers' bind (EADDRINUSE: test_multinode.py on 2 x H200,
    2026-11-26, where the worker whose store failed left its peer waiting out the timeout)."""
    path = os.path.join(tempfile.mkdtemp(prefix="moe_a2a_rendezvous_"), "store") if rank == 0 else None
    return "file://" + all_gather(path, None)[0]


def worker_env() -> dict:
    """This process's environment without what torchrun set for it."""
    return {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith("TORCHELASTIC_")}
