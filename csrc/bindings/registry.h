// Engines live in C++; torch ops refer to them by an integer id (ints trace cleanly through
// torch.compile and CUDA graphs, opaque objects do not).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "ep/engine.h"
#include "moe_a2a/format.h"

// TORCH_CHECK with the message built by moe_a2a::cat (no iostream formatting; see format.h).
#define MOE_A2A_TORCH_CHECK(cond, ...) TORCH_CHECK(cond, ::moe_a2a::cat(__VA_ARGS__))

namespace moe_a2a {

int64_t register_engine(std::shared_ptr<EpEngine> engine, at::ScalarType dtype);
// An id with a config and no engine: the Meta kernels (shapes only) work with it, the GPU
// kernels raise. For the tests that check the ops' outputs on a machine without a GPU.
int64_t register_shapes_only(const EpConfig& config, at::ScalarType dtype);
void unregister_engine(int64_t id);
// Throws a clear error for an unknown or closed id (and for an id with shapes only).
EpEngine& engine_by_id(int64_t id);
EpConfig config_by_id(int64_t id);
at::ScalarType engine_dtype(int64_t id);

// The kernels' element type of a token dtype: bfloat16, float16, else float32 (callers check the
// dtype first: token_dtype in module.cpp, the op's own check in experts_ops.cpp).
TokenType token_type(at::ScalarType t);

// "[8, 2048]"
std::string shape_str(at::IntArrayRef shape);

// The names of what the dispatch ops return, in order (ops.cpp DispatchOutputs).
std::vector<std::string> dispatch_output_names();

}  // namespace moe_a2a
