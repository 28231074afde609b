#!/usr/bin/env bash
# Call 6 (session 17), nvidia-h100-x2: a quantizing (fp8 e4m3fn) dispatch placing its own rows from 512 tokens too,
# not 1024 (.exp/f8: own_placed_from gives kOwnPlacedCopyTokens for both), against this tree; DeepSeek-V3, T = 1024,
# counts 512/512, 768/768, 600/300, drawn, bf16 and fp8 dispatch each (bf16 is the same code in both trees); two
# rounds (this f8 f8 this). Then the whole GPU suite on .exp/f8 (built with the tests' hooks).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,1024 --counts 512/512;768/768;600/300;drawn --fp8 e4m3fn" \
  timeout 215 bash tools/graph_ab.sh $OUT/ab . .exp/f8 > $OUT/ab.log 2>&1
echo "graph_ab rc=$?" >> $OUT/machine.txt
(cd .exp/f8 && timeout 275 bash tools/gpu_run.sh $OUT/suite build,tests > $OUT/suite.log 2>&1; echo "suite rc=$?" >> $OUT/machine.txt)
cd $OUT && tar czf ab.tar.gz ab suite && rm -rf ab suite
