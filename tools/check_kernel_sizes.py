#!/usr/bin/env python3
"""Code-size budgets of the round's kernels: CI fails when a kernel's sm_90 code outgrows its budget.

At a few tokens most instructions a kernel runs are run once in that launch, fetched cold, so its
size is on the critical path (docs/design/protocol.md, "Code size": 128 KB of straight-line cold
code took about 10 us more than warm; a version of combine 93 KB larger was 16-30% slower with no
wait to blame). A change that takes a kernel past its budget fails here. If a proxy A/B
(tools/graph_ab.sh) shows that the growth does not cost, raise the budget in the same commit and
say why; if it shrinks a kernel, lower the budget so the gain is kept.

    python3 tools/check_kernel_sizes.py [--arch sm_90]

Needs nvcc only: a kernel's size is its .text section in the cubin. Its registers a thread (ptxas -v)
are printed beside it, without a budget. tools/kernel_size.py (which
also needs nvdisasm) says which source lines the bytes come from.
"""

import argparse
import os
import re
import shutil
import struct
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from kernel_size import ROOT, compile_cubin, demangle  # tools/, beside this file

# (source, regular expression on the demangled kernel name, budget in KB). Sizes when set
# (2026-11-25, CUDA 13, sm_90; after the divisors of include/moe_a2a/divisor.h) in the comments; the
# budgets leave about 7% of room.
BUDGETS = [
    # Each round's kernel has two instances (session 13): `false`, below kOwnRowsDirectTokens (1024) tokens, leaves
    # out the own-rows code that only a fused launch from 1024 tokens runs (dispatch's own_direct / own_placed,
    # combine's own_direct); `true` has it. Leaving it out gained 0.1-0.6 us of graph d+c at every challenge shape
    # drawn and 0.2-0.4 at DeepSeek-V3 128 / 256 tokens (2 x H100, alternated with main in one call), so the small
    # instances have budgets of their own.
    # The counting block's 16-byte reads of topk_idx from 8192 ids on (count_wide) since 2026-11-26 (session 11;
    # +13 KB, was 114.5 / 114.6-116.0 / 134.8-156.1): that code runs in one block from 1024 tokens of top-8 on.
    # DeepSeek-V3 at 4096 tokens: graph d+c 590.4 against 602.1 us, fp8 504.9 against 520.1; the challenge
    # shapes drawn within 0.2 us of graph d+c (2 x H100, the same call).
    # Ranks by reservation in a quantizing dispatch whose blocks all wait for the counts (reserve_pairs, session 30)
    # add about 10 KB to the quantizing `true` instances (e4m3fn 137.1-138.4, e4m3fnuz 157.4-178.5), code that runs
    # from 1024 tokens: fp8 at 4096 tokens 500.8 -> 490.4 us graph d+c (2 x H100, the same call, as kept).
    # A bad id no longer sets the counts' error bit (session 48: the counting loops track nothing but the counts, and
    # reserve_pairs no bad-id word): every dispatch instance 3.3-4.2 KB smaller, each budget 4 KB lower.
    ("csrc/ep/dispatch.cu", r"dispatch_kernel<\(SendCodec\)0, \(Fp8Format\)0, false>", 129),  # plain copy: 120.9
    ("csrc/ep/dispatch.cu", r"dispatch_kernel<\(SendCodec\)0, \(Fp8Format\)0, true>", 133),  # plain copy: 125.4
    # Blocks taking turns where every rank holds about the same tokens (receives_first, session 32) add 1.6-1.9 KB
    # to the `true` instances only (e4m3fn 138.6-140.0, was 137.0-138.2): fp8 at 4096 tokens every rank 496.6 ->
    # 476.1 us graph d+c, 2304 every rank 300.8 -> 289.7, unequal and drawn counts within 0.8 us (2 x H100, the
    # same call); hence a budget of 142 for those.
    ("csrc/ep/dispatch.cu", r"dispatch_kernel<\(SendCodec\)[123], \(Fp8Format\)1, false>", 135),  # e4m3fn: 124.0-125.4
    ("csrc/ep/dispatch.cu", r"dispatch_kernel<\(SendCodec\)[123], \(Fp8Format\)1, true>", 138),  # e4m3fn: 134.1-135.5
    ("csrc/ep/dispatch.cu", r"dispatch_kernel<\(SendCodec\)[123], \(Fp8Format\)2,", 178),  # e4m3fnuz: 144.1-175.8
    # Own rows summed on the token side since 2026-11-26 (+23 KB; that code runs from 1024 tokens on, and the
    # small shapes stayed within 0.3 us on 2 x H100, graph d+c in the same call); only the `true` instance has it.
    ("csrc/ep/combine.cu", r"combine_kernel<\(TokenType\)[01], false, false>", 85),  # bf16 / fp16: 79.0-79.2
    ("csrc/ep/combine.cu", r"combine_kernel<\(TokenType\)[01], true, false>", 104),  # bf16 / fp16: 97.1-97.5
    ("csrc/ep/combine.cu", r"combine_kernel<\(TokenType\)2, false, false>", 71),  # fp32: 66.4
    ("csrc/ep/combine.cu", r"combine_kernel<\(TokenType\)2, true, false>", 87),  # fp32: 81.4
    # The weight gradients' instances (`, true>`; session 51): only the backward of dispatch with the weights at the
    # experts runs them, so the forward combine's instances above are built without their words.
    ("csrc/ep/combine.cu", r"combine_kernel<\(TokenType\)[01], false, true>", 87),  # bf16 / fp16: 80.9-81.1
    ("csrc/ep/combine.cu", r"combine_kernel<\(TokenType\)[01], true, true>", 108),  # bf16 / fp16: 101.6-101.9
    ("csrc/ep/combine.cu", r"combine_kernel<\(TokenType\)2, false, true>", 73),  # fp32: 68.2
    ("csrc/ep/combine.cu", r"combine_kernel<\(TokenType\)2, true, true>", 91),  # fp32: 85.8
    # Row tasks and own rows answered while sending since 2026-11-26 (session 8; 83.9 / 93.5 / 68.4, was
    # 29.0-32.4): 28% faster at 2048 tokens and 19% at 512 (2 x H100, DeepSeek-V3); at 128 tokens, where the
    # code runs cold, 43.4 us against 43.3 with the weight gradients, 34.2 against 32.4 without (the same call).
    # Two instances since 2026-11-27 (session 20): `true` (EpConfig::grad_subranges_possible, an engine of groups of
    # 8 tokens or more) has the sub-ranges' code, +11 KB; with it the round at 128 tokens took 36.0 / 30.0 us against
    # 33.1 / 24.9 (with / without weight gradients, 2 x H100, the same call), so `false` leaves it out.
    # Flagged weight gradients (session 21) added 2-3 KB to each: 128 tokens 33.5 -> 31.7 us all the same.
    # prefetch_y (session 22) added 2 KB; the first ways to write it added 6-7 KB each (nvcc then chose other
    # registers and unrolling: even num_groups hoisted out of the send loop into a variable did, alone), so
    # check the size of any change to this kernel's body, however small.
    # Turns in the `true` instance (session 33; the `false` one is written apart and unchanged, 88.2 / 97.9 / 74.0):
    # 101.1 / 110.2 / 86.9, was 100.6 / 110.1 / 86.4; a second send_group call site had added 44 KB.
    ("csrc/ep/combine_backward.cu", r"combine_backward_kernel<\(TokenType\)[01], false>", 100),  # bf16/fp16 87.4/96.9
    ("csrc/ep/combine_backward.cu", r"combine_backward_kernel<\(TokenType\)[01], true>", 114),  # bf16/fp16 99.4/108.8
    ("csrc/ep/combine_backward.cu", r"combine_backward_kernel<\(TokenType\)2, false>", 76),  # fp32: 73.1
    ("csrc/ep/combine_backward.cu", r"combine_backward_kernel<\(TokenType\)2, true>", 89),  # fp32: 85.0
]


def text_sections(cubin):
    """{symbol: bytes} of the .text.<symbol> sections of a 64-bit little-endian ELF file."""
    with open(cubin, "rb") as f:
        elf = f.read()
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError(f"{cubin}: not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def header(i):  # (name offset, file offset, size) of section i
        base = shoff + i * shentsize
        name = struct.unpack_from("<I", elf, base)[0]
        offset, size = struct.unpack_from("<QQ", elf, base + 0x18)
        return name, offset, size

    strtab = header(shstrndx)[1]
    out = {}
    for i in range(shnum):
        name_at, _, size = header(i)
        name = elf[strtab + name_at : elf.index(b"\0", strtab + name_at)].decode()
        if name.startswith(".text."):
            out[name[len(".text.") :]] = size
    return out


def kernel_sizes(source, arch, tmp):
    """{short kernel name: (KB, registers a thread or None)} of one source file compiled to a cubin.
    The registers are printed, not budgeted: a call at a hot site once took the dispatch kernels
    from about 110 to 190 (docs/performance.md, the eleventh session)."""
    cubin = os.path.join(tmp, os.path.basename(source) + ".cubin")
    registers = compile_cubin(os.path.join(ROOT, source), arch, cubin)
    sections = text_sections(cubin)
    return {
        name: (size / 1024, registers.get(symbol))
        for name, symbol, size in zip(demangle(list(sections)), sections, sections.values())
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args(argv)
    if shutil.which("c++filt") is None:
        sys.exit("check_kernel_sizes: c++filt (binutils) not found: the budgets match demangled names")
    sources = sorted({source for source, _, _ in BUDGETS})
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(len(sources)) as pool:
        sizes = dict(zip(sources, pool.map(lambda s: kernel_sizes(s, args.arch, tmp), sources)))
    failures = []
    for source in sources:
        for name, (kb, regs) in sorted(sizes[source].items()):
            budgets = [(pattern, kb_max) for s, pattern, kb_max in BUDGETS if s == source and re.search(pattern, name)]
            if len(budgets) != 1:
                failures.append(f"{source}: {name} matches {len(budgets)} budgets (give it exactly one)")
                continue
            verdict = "ok" if kb <= budgets[0][1] else "OVER BUDGET"
            shown = "-" if regs is None else str(regs)
            print(f"  {kb:6.1f} KB  (budget {budgets[0][1]:3d})  {verdict:11s}  {shown:>3} registers  {name}")
            if kb > budgets[0][1]:
                failures.append(f"{source}: {name} is {kb:.1f} KB, over its budget of {budgets[0][1]} KB")
    for pattern_source, pattern, _ in BUDGETS:
        if not any(re.search(pattern, name) for name in sizes[pattern_source]):
            failures.append(f"{pattern_source}: no kernel matches the budget pattern {pattern!r}")
    for line in failures:
        print(f"check_kernel_sizes: {line}", file=sys.stderr)
    if failures:
        print("check_kernel_sizes: see the docstring of tools/check_kernel_sizes.py", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
