#!/usr/bin/env python3
"""Code size of the kernels of one source file, and which source lines it comes from.

At a few tokens most instructions a kernel runs are run for the first time in that launch, so code
size is on the critical path (docs/design/protocol.md, "Code size"): check it when a change touches a
device function inlined at many sites.

    python3 tools/kernel_size.py csrc/ep/combine.cu [--arch sm_90] [--lines 20]

Compiles FILE to a cubin (nvcc -cubin -lineinfo, the build's include paths), prints each kernel's
size in KB, its registers a thread (ptxas -v) and, with --lines N, the N source lines that account
for most of its bytes (nvdisasm -g; inlined code is charged to the line it came from). Needs nvcc
and nvdisasm (CUDA toolkit; NVDISASM names another nvdisasm). NVIDIA only: gfx942 code is
compile-checked, not sized, here.
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUNCTION = re.compile(r"^\.text\.(\S+):$")
LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/")
BYTES_PER_INSTRUCTION = 16  # every SASS instruction since Volta
PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")


def find_tool(name, env):
    path = os.environ.get(env) or shutil.which(name)
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if not path and os.path.exists(os.path.join(cuda_home, "bin", name)):
        path = os.path.join(cuda_home, "bin", name)
    if not path:
        sys.exit(f"kernel_size: {name} not found (set {env} or put it on PATH)")
    return path


def demangle(symbols):
    """Short names of kernel symbols (one c++filt call): without namespaces and parameter list,
    e.g. void combine_kernel<(TokenType)0>."""
    tool = shutil.which("c++filt")
    if tool is None:
        return list(symbols)
    text = subprocess.run([tool], input="\n".join(symbols), capture_output=True, text=True, check=True).stdout
    return [re.sub(r"\(anonymous namespace\)::|moe_a2a::", "", n).split("(EpContext")[0] for n in text.splitlines()]


def compile_cubin(source, arch, cubin, lineinfo=False):
    """nvcc -cubin of one source file with the build's include paths (-lineinfo for nvdisasm -g).
    Returns {kernel symbol: registers a thread}, from ptxas -v."""
    cmd = [find_tool("nvcc", "NVCC"), f"-arch={arch}", "-std=c++17", "-O3", "-cubin", "-Xptxas", "-v", "-o", cubin]
    cmd += ["-lineinfo"] if lineinfo else []
    cmd += ["-I", os.path.join(ROOT, "include"), "-I", os.path.join(ROOT, "csrc"), source]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise subprocess.CalledProcessError(done.returncode, cmd)
    return ptxas_registers(done.stdout + done.stderr)


def ptxas_registers(log):
    """{entry symbol: registers a thread} from ptxas -v's lines: "Compiling entry function 'SYM'"
    comes first, its "Used N registers" after (a device function's own lines come between)."""
    out, entry = {}, None
    for text in log.splitlines():
        if m := PTXAS_ENTRY.search(text):
            entry = m.group(1)
        elif entry is not None and (m := PTXAS_REGISTERS.search(text)):
            out[entry] = int(m.group(1))
            entry = None
    return out


def line_bytes(disassembly):
    """{kernel symbol: Counter{(file, line): bytes}} from `nvdisasm -g -c` output."""
    kernels, current, where = {}, None, ("?", 0)
    for text in disassembly.splitlines():
        if m := FUNCTION.match(text):
            current = kernels.setdefault(m.group(1), collections.Counter())
        elif m := LINE.search(text):
            path = m.group(1)
            where = (os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path, int(m.group(2)))
        elif current is not None and INSTRUCTION.match(text):
            current[where] += BYTES_PER_INSTRUCTION
    return kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a .cu file, e.g. csrc/ep/combine.cu")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--lines", type=int, default=0, help="show the N source lines of most bytes per kernel")
    args = parser.parse_args()
    nvdisasm = find_tool("nvdisasm", "NVDISASM")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        registers = compile_cubin(args.file, args.arch, cubin, lineinfo=True)
        disassembly = subprocess.run([nvdisasm, "-g", "-c", cubin], capture_output=True, text=True, check=True).stdout
    kernels = sorted(line_bytes(disassembly).items())
    for name, (symbol, lines) in zip(demangle([symbol for symbol, _ in kernels]), kernels):
        regs = registers.get(symbol)
        print(f"{sum(lines.values()) / 1024:7.1f} KB  {regs if regs is not None else '-':>3} registers  {name}")
        for (path, line), size in lines.most_common(args.lines):
            print(f"      {size / 1024:6.1f} KB  {path}:{line}")


if __name__ == "__main__":
    main()
