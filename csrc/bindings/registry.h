// Engines live in C++; torch ops refer to them by an integer id (ints trace cleanly through
// torch.compile and CUDA graphs, opaque objects do not).
#pragma once

#include <cstdint>
#include <memory>

#include <torch/types.h>

#include "ep/engine.h"

namespace moe_a2a {

int64_t register_engine(std::shared_ptr<EpEngine> engine, at::ScalarType dtype);
void unregister_engine(int64_t id);
// Throws a clear error for an unknown or closed id.
EpEngine& engine_by_id(int64_t id);
at::ScalarType engine_dtype(int64_t id);

}  // namespace moe_a2a
