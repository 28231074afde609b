#!/usr/bin/env bash
# Session 30, call 1, nvidia-h100-x2, about 400 s with the start.
# 1. acq = main + every spin's look an acquire load on NVIDIA (ld_poll_sys, kPollAcquires): a wait that spins no
#    longer takes a second, acquire load once the word is there. The SASS of both loads first (is ld.acquire.sys the
#    same load plus CCTL.IVALL?). Graph A/B at README's ten shapes and the layer's rounds, two rounds each.
# 2. Profiler build of main, traced at E128-K8-H4096-T256 and DeepSeek-V3 128 tokens, counts drawn (where do the
#    mid shapes' 30.7 us go; analysed on the CPU machine).
# Setup (here): for t in base acq prof: mkdir -p .exp/$t && git archive 9b5822d | tar -x -C .exp/$t; acq then took the
# kernel and tool changes of this session's first commit (ld_poll_sys); rm -rf .exp/*/docs.
# carry [".exp/base", ".exp/acq", ".exp/prof"].
source tools/device_call.sh
(cd /tmp && cat > acq.cu << 'CU'
#include <cstdint>
__device__ uint64_t acq(const uint64_t* p) { uint64_t v; asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v; }
__device__ uint64_t rlx(const uint64_t* p) { uint64_t v; asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v; }
__global__ void spin_acquire(const uint64_t* f, const int* d, int* out) { uint64_t v; while (((v = acq(f)) & 1) == 0) {} out[0] = d[threadIdx.x] + (int)v; }
__global__ void spin_relaxed_then_acquire(const uint64_t* f, const int* d, int* out) { uint64_t v; while (((v = rlx(f)) & 1) == 0) {} v = acq(f); out[0] = d[threadIdx.x] + (int)v; }
CU
nvcc -arch=sm_90 -cubin -o acq.cubin acq.cu && cuobjdump -sass acq.cubin) > $OUT/sass-acquire.txt 2>&1
log "sass rc=$?"
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/acq >> $OUT/driver.log &
bounded 220 bash -c "cd .exp/prof && MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=5 python3 setup.py build_ext \
  --inplace --force > $L/build-profiler.log 2>&1; echo profiler build rc=\$? >> $OUT/driver.log" &
wait
log "built"
export AB_BUILT=1
AB_ROUNDS=2 ab graph 150 .exp/base .exp/acq
AB_BENCH=layer AB_ROUNDS=2 ab layer 120 .exp/base .exp/acq
for s in "128,8,4096,256" "256,8,7168,128"; do
  n=${s//,/-}; mkdir -p $OUT/trace-$n; left=$((560 - (SECONDS - T0)))
  [ $left -gt 30 ] || break
  PYTHONPATH=$PWD/.exp/prof/python bounded $(( left < 80 ? left : 80 )) torchrun --nproc-per-node=2 \
    benchmarks/bench_all2all.py --shapes "$s" --no-graph --no-check --trace-graph 8 \
    --systems moe_a2a --no-microbench --trace $OUT/trace-$n/trace > $L/trace-$n.log 2>&1
  log "trace $n rc=$?"
done
cd $OUT && tar czf all.tar.gz logs graph layer trace-* 2> /dev/null; rm -rf logs graph layer trace-*
log done
