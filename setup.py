"""Builds moe_a2a._C for whichever torch is installed: ROCm (hipcc, gfx942 by default,
PYTORCH_ROCM_ARCH overrides) or CUDA (nvcc, sm_90 by default, TORCH_CUDA_ARCH_LIST
overrides). MOE_A2A_PROFILE=1 compiles the in-kernel profiler in; MOE_A2A_TEST_HOOKS=1 the
GPU tests' hooks (tools/gpu_run.sh builds with them; a user's install leaves them out). No network at build time:
install with `python3 -m pip install --no-build-isolation -e .` so the installed torch is used."""

import glob
import os
import sys

try:
    import torch
except ImportError:
    # The two ways a newcomer gets here: a bare `pip` that belongs to another Python than the one holding torch (a venv
    # without pip of its own, e.g., falls through to the system's), or a build without --no-build-isolation (pip's
    # isolated environment has no torch). Name the interpreter, since that is what differs.
    sys.exit(
        f"moe_a2a builds against the installed torch, and this Python ({sys.executable}) cannot import torch. "
        "Install with the Python that holds torch: `python3 -m pip install --no-build-isolation -e .` "
        "(--no-build-isolation: pip's isolated build environment has no torch)."
    )
from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
IS_ROCM = torch.version.hip is not None


def sources():
    # Host-only core (no GPU runtime), GPU code (.cu), and the torch/pybind11 bindings.
    found = sorted(glob.glob("csrc/**/*.cpp", recursive=True) + glob.glob("csrc/**/*.cu", recursive=True))
    if not found:
        raise RuntimeError("no sources under csrc/")
    return found


def flags():
    common = ["-O3", "-std=c++17"]
    defines = []
    if os.environ.get("MOE_A2A_PROFILE", "0") == "1":
        defines.append("-DMOE_A2A_ENABLE_PROFILER=1")
    if os.environ.get("MOE_A2A_TEST_HOOKS", "0") == "1":
        defines.append("-DMOE_A2A_TEST_HOOKS=1")
    if IS_ROCM:
        os.environ.setdefault("PYTORCH_ROCM_ARCH", "gfx942")
        # The .cpp files include the platform headers too: tell them the backend.
        cxx = common + defines + ["-D__HIP_PLATFORM_AMD__=1"]
        gpu = common + defines
    else:
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
        cxx = common + defines + ["-DMOE_A2A_FORCE_CUDA=1"]
        gpu = common + defines + ["--expt-relaxed-constexpr", "-lineinfo"]
    return {"cxx": cxx, "nvcc": gpu}


setup(
    name="moe_a2a",
    version="0.1.0",
    description="Mixture-of-Experts all-to-all (dispatch/combine) for one node of GPUs, HIP and CUDA",
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[
        CUDAExtension(
            name="moe_a2a._C",
            sources=sources(),
            include_dirs=[os.path.join(ROOT, "include"), os.path.join(ROOT, "csrc")],
            extra_compile_args=flags(),
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.9",
)
