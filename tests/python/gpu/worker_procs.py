"""For GPU tests that start worker processes of their own (test_lifetime.py, test_faults.py): the
workers create their own process groups, so they need free ports and an environment without
what torchrun set for the test process."""

import os
import socket

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


def worker_env() -> dict:
    """This process's environment without what torchrun set for it."""
    return {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith("TORCHELASTIC_")}
