#!/usr/bin/env bash
# Session 46's call 3 (one H200): what the suite's two halves at world 8 (calls 1, 2) left out, at world 8: the
# profiler's build and GPU tests (the suite's 6 profiler skips), transformers' smoke run (bench_hf_model.py --smoke,
# equal and unequal batches) with eight ranks, and the MPS proxy's benchmark (bench_graph.py, two ranks on GPU 0): the
# first benchmark run since benchmarks/common.py sets HIP_FORCE_DEV_KERNARG before torch loads (inert on CUDA; the
# metadata should record it). Bounded by 560 s.
source tools/device_call.sh
ONE_GPU_RANKS=8 bounded 560 bash tools/gpu_run.sh $L/c3 build,hf_smoke,proxy,profile -rs > $L/c3.log 2>&1
log "gpu_run build,hf_smoke,proxy,profile at world 8 rc=$?"
cp $L/c3/summary.txt $OUT/c3-summary.txt 2> /dev/null
grep -rh -o '"HIP_FORCE_DEV_KERNARG"[^,}]*' $L/c3 2> /dev/null | sort | uniq -c > $OUT/kernarg-in-metadata.txt
(cd $L/c3 && for t in *.tar.gz; do tar xzf "$t" -O 2> /dev/null | grep -a -o '"HIP_FORCE_DEV_KERNARG"[^,}]*'; done) \
  | sort | uniq -c >> $OUT/kernarg-in-metadata.txt
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
