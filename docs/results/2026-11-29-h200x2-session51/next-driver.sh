#!/usr/bin/env bash
# Prepared in session 51 for the next two-GPU call (2 x H100 or H200), never run: two changes for the router weights
# at the experts, each compile-checked for sm_90 and gfx942 (check_kernel_sizes.py: the forward combine's instances
# unchanged in size; amd_resources.sh: no spill), timed against main in one call, then tested.
# - next-swiglu-waves.patch: moe_a2a.swiglu a wave a row, 4 vectors of each input in flight a lane, grad_w a wave sum
#   (no block barrier a row). In call 5 the layer's step with the weights at the experts took 48 us more than the
#   unweighted one besides its rounds at 2048 tokens (the rounds saved 39): our reading is the weighted backward's
#   barriers, not timed kernel by kernel.
# - next-words-early.patch: the backward of dispatch's token side takes a unit's weight gradients on its last wave
#   while the other waves sum (at a few tokens a group the last wave has no sum), not after the sums: 1.11x the
#   combine at 128 tokens after a forward round in call 5 (issue 40: 1.1x).
# Setup (here), from the repository root:
#   P=docs/results/2026-11-29-h200x2-session51
#   for t in main sw we swwe; do
#     rm -rf .exp/$t; mkdir -p .exp/$t; git archive HEAD | tar -x -C .exp/$t --exclude=docs
#   done
#   for t in sw swwe; do (cd .exp/$t && patch -p1 < ../../$P/next-swiglu-waves.patch); done
#   for t in we swwe; do (cd .exp/$t && patch -p1 < ../../$P/next-words-early.patch); done
#   carry [".exp/main", ".exp/sw", ".exp/we", ".exp/swwe"]; about 500 s.
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/main .exp/sw .exp/we .exp/swwe:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
# The layer with the weights at the experts: its step and the rounds the patches touch, two rounds alternated.
AB_BENCH=layer AB_ROUNDS=2 \
  AB_LAYER_ARGS="--weights-at-experts --phases fwd+bwd,experts,combine,dispatch-bwd,dispatch-bwd-train" \
  ab wae 260 .exp/main .exp/sw .exp/we
# The gradient tests on both patches together (the swiglu kernel's own, the weights at the experts', the layer's).
T="tests/python/gpu/test_swiglu.py tests/python/gpu/test_weights_at_experts.py tests/python/gpu/test_moe_layer.py"
T="$T tests/python/gpu/test_autograd.py"
(cd .exp/swwe && GPU_TESTS="$T" bounded $((585 - (SECONDS - T0))) bash tools/gpu_run.sh $L/tests tests -rs \
  > $L/tests.log 2>&1)
log "tests rc=$?"
cp $L/tests/summary.txt $OUT/tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs wae 2> /dev/null; rm -rf logs wae
log done
