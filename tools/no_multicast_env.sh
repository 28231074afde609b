# Sourced by every tools/ script that starts GPU processes: never NVLink multicast (it can take a
# shared host's GPUs out of service). These are the values of moe_a2a.NO_MULTICAST_ENV
# (python/moe_a2a/__init__.py, the one definition), for processes that never import moe_a2a;
# benchmarks/tests/test_bench_environment.py checks that the two agree and that no other script sets them.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
