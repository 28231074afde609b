"""The multicast-off environment: every benchmark imports common first, the tools take the values
from one file, and common sets them before torch loads.

CPU only (no GPU, no second rank): python -m pytest benchmarks/tests
"""

import os
import subprocess
import sys

import common


def test_benchmarks_import_common_first():
    """Multicast stays off through ONE place (moe_a2a.NO_MULTICAST_ENV): every script (a
    __main__ block) and every module that uses torch.distributed imports common (which imports
    moe_a2a first) before torch or anything that loads it, and no file sets the variables
    itself."""
    import ast

    bench = common.BENCH_DIR
    loaders = {"torch", "baselines", "bench_all2all", "fake_gemm", "microbench", "moe_a2a", "triton"}
    checked = []
    for name in sorted(os.listdir(bench)):
        if not name.endswith(".py"):  # the tests, in tests/, are not scripts
            continue
        src = open(os.path.join(bench, name)).read()
        assert "NCCL_NVLS_ENABLE" not in src, f"{name} sets the multicast environment itself"
        if name == "common.py":
            continue  # test_common_sets_the_environment_before_torch
        if "__main__" not in src and "torch.distributed" not in src:
            continue  # a helper that never starts a process group (fake_gemm)
        first = None
        for node in ast.parse(src).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                roots = {m.split(".")[0] for m in mods if m}
                if "common" in roots:
                    first = "common"
                    break
                if roots & loaders:
                    first = sorted(roots & loaders)[0]
                    break
        assert first == "common", f"{name} imports {first} before common"
        checked.append(name)
    assert {
        "bench_all2all.py",
        "bench_sweep.py",
        "bench_graph.py",
        "microbench.py",
        "baselines.py",
        "bench_moe_layer.py",
        "bench_hf_model.py",
        "bench_host.py",
        "scaffold.py",
    } <= set(checked)


def test_tools_take_the_multicast_environment_from_one_file():
    """The tools' shell scripts start processes that may never import moe_a2a: they source
    tools/no_multicast_env.sh, whose values are moe_a2a.NO_MULTICAST_ENV's, and set none
    themselves."""
    import re

    import moe_a2a

    tools = os.path.join(common.REPO_ROOT, "tools")
    env_file = open(os.path.join(tools, "no_multicast_env.sh")).read()
    exported = dict(re.findall(r"\b([A-Z_]+)=(\S+)", env_file.split("export", 1)[1]))
    assert exported == moe_a2a.NO_MULTICAST_ENV
    for name in sorted(os.listdir(tools)):
        if not name.endswith(".sh") or name == "no_multicast_env.sh":
            continue
        src = open(os.path.join(tools, name)).read()
        assert not any(f"{k}=" in src for k in exported), f"tools/{name} sets the multicast environment itself"
        # Lines of code only: a comment that mentions torchrun (tools/bounded.sh) starts nothing.
        code = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("#"))
        if "torchrun" in code or "python3" in code:
            assert "no_multicast_env.sh" in src, f"tools/{name} starts processes without tools/no_multicast_env.sh"


def test_common_sets_the_environment_before_torch():
    """In a fresh interpreter with none of the variables set, importing common alone puts every
    entry of moe_a2a.NO_MULTICAST_ENV, and ROCm's launch setting, into the environment before torch
    starts to load."""
    bench = common.BENCH_DIR
    code = r"""
import os, sys
seen = {}
class Spy:  # records the environment when torch is first looked up
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.update(os.environ)
        return None
sys.meta_path.insert(0, Spy())
sys.path[:0] = [%r, %r]
import common
import moe_a2a
assert common.NO_MULTICAST_ENV is moe_a2a.NO_MULTICAST_ENV
assert seen, "torch never loaded"
wanted = {**moe_a2a.NO_MULTICAST_ENV, **common.ROCM_LAUNCH_ENV}
missing = {k: seen.get(k) for k, v in wanted.items() if seen.get(k) != v}
assert not missing, f"not set when torch started to load: {missing}"
print("ok")
""" % (bench, os.path.join(os.path.dirname(bench), "python"))
    env = {k: v for k, v in os.environ.items() if k not in {**common.NO_MULTICAST_ENV, **common.ROCM_LAUNCH_ENV}}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
