"""moe_a2a: Mixture-of-Experts all-to-all (dispatch / combine) for one node of GPUs.

Pure-Python modules (reference, sol, trace tools) import without the compiled extension;
AllToAll and SymmetricHeap load it on first use.
"""

import os as _os

# NVLink multicast can take a shared host's GPUs out of service; never let a library we call
# turn it on in this process or its children. The one place that says so: scripts and tests
# import moe_a2a before torch (a value the launcher set is kept; benchmarks/common.py warns if
# it turns multicast back on).
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
for _var, _val in NO_MULTICAST_ENV.items():
    _os.environ.setdefault(_var, _val)

from . import layers  # noqa: E402,F401  (pure Python; loads the extension only when a layer is built)
from .all_to_all import AllToAll, Dispatched  # noqa: E402
from .heap import SymmetricHeap  # noqa: E402

__all__ = ["AllToAll", "Dispatched", "SymmetricHeap", "layers"]
__version__ = "0.1.0"
