#!/usr/bin/env bash
# Session 32, call 2: nvidia-h100-x2, about 420 s with the start. Written in session 31 as next-driver-2.sh.
# next-alternate-turns.patch (compile-checked for NVIDIA and gfx942 only): where every block of a dispatch or a
# combine runs both halves, odd blocks take their receive turn before their next send. Session 31's traces of fp8 at
# 4096 tokens with two groups a block had every block send both groups before it received, so the link and the
# copies took turns; fp8 with every rank at one count above 2048 tokens lost 2-3% to the doubled groups. Only
# launches with more than one group or unit a block and every block on both halves change (dispatch: fp8 above 2112
# tokens at 132 SMs, bf16 there is split in halves; combine: above 2112 tokens). The eager columns tell the two
# kernels apart. Code size as patched (session 31, sm_90): combine 78.8-97.5 KB, dispatch 124.4-178.4, all in budget.
# 1. graph A/B, engine of 4096 tokens, DeepSeek-V3 bf16 and fp8 e4m3fn, pairs and drawn, two rounds.
# 2. alt's tests on a hooks build: test_all_to_all.py, test_fp8.py.
# Setup (here): mkdir -p .exp/{main,alt,alth}; git archive HEAD into each; (cd .exp/alt && patch -p1 <
# ../../docs/results/2026-11-28-h100x2-session31/next-alternate-turns.patch), same for alth; rm -rf .exp/*/docs.
# carry [".exp/main", ".exp/alt", ".exp/alth"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/alt .exp/alth:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --capacity 4096 --fp8 e4m3fn \
  --counts 4096/512;1024/3072;2304/2304;3072/3072;4096/4096;drawn" ab large 190 .exp/main .exp/alt
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_fp8.py" \
  bounded 200 bash -c "cd .exp/alth && bash tools/gpu_run.sh $L/alt-tests tests > $L/alt-tests.log 2>&1"
log "alt tests rc=$?"
cp $L/alt-tests/summary.txt $OUT/alt-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs large 2> /dev/null; rm -rf logs large
log done
