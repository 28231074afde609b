// pybind11 module moe_a2a._C: the symmetric heap class, engine creation, config helpers, the
// microbenchmarks and the floor exchange that the benchmarks use, and, built with
// MOE_A2A_TEST_HOOKS=1 only, the GPU tests' hooks (at the end). The torch ops themselves are
// registered in ops.cpp.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include "ep/fp8_selfcheck.h"
#include "heap/floor_exchange.h"
#include "heap/heap_selftest.h"
#include "moe_a2a/platform/device.h"
#include "moe_a2a/profiler_events.h"
#include "profiler/clock_sync.h"
#include "registry.h"

#ifndef MOE_A2A_TEST_HOOKS
#define MOE_A2A_TEST_HOOKS 0
#endif

namespace py = pybind11;
using moe_a2a::EpConfig;
using moe_a2a::SymmetricHeap;

namespace {

at::ScalarType token_dtype(const std::string& name) {
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "float32") return at::kFloat;
  MOE_A2A_TORCH_CHECK(false, "moe_a2a: token dtype must be bfloat16, float16 or float32, got ", name);
}

moe_a2a::Fp8Format fp8_format_of(const std::string& name) {
  if (name == "none") return moe_a2a::Fp8Format::kNone;
  if (name == "e4m3fn") return moe_a2a::Fp8Format::kE4M3Fn;
  if (name == "e4m3fnuz") return moe_a2a::Fp8Format::kE4M3Fnuz;
  MOE_A2A_TORCH_CHECK(false, "moe_a2a: fp8 format must be \"none\", \"e4m3fn\" or \"e4m3fnuz\", got \"", name, "\"");
}

moe_a2a::Layout layout_of(const std::string& name) {
  if (name == "padded") return moe_a2a::Layout::kPadded;
  if (name == "packed") return moe_a2a::Layout::kPacked;
  MOE_A2A_TORCH_CHECK(false, "moe_a2a: layout must be \"padded\" or \"packed\", got \"", name, "\"");
}

// The one EpConfig of an all-to-all, from the Python API's names (dtype and layout spelled as
// there); `rank` is the caller's. Every config helper below takes it.
EpConfig make_config(const py::kwargs& kw) {
  static const char* const kKnown[] = {"world",
                                       "rank",
                                       "num_experts",
                                       "topk",
                                       "hidden",
                                       "max_tokens",
                                       "capacity",
                                       "dtype",
                                       "layout",
                                       "num_blocks",
                                       "groups_per_block",
                                       "expert_alignment",
                                       "fp8",
                                       "fp8_pow2_scales",
                                       "dispatch_senders",
                                       "combine_senders"};
  for (const auto& item : kw) {
    const std::string key = py::str(item.first);
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    MOE_A2A_TORCH_CHECK(known, "moe_a2a: unknown EpConfig field ", key);
  }
  auto get = [&](const char* k, int fallback) { return kw.contains(k) ? kw[k].cast<int>() : fallback; };
  EpConfig c;
  c.world = get("world", 0);
  c.rank = get("rank", 0);
  c.num_experts = get("num_experts", 0);
  c.topk = get("topk", 0);
  c.hidden = get("hidden", 0);
  c.max_tokens = get("max_tokens", 0);
  c.expert_capacity = get("capacity", 1);
  c.elem_bytes = static_cast<int32_t>(c10::elementSize(token_dtype(kw["dtype"].cast<std::string>())));
  c.layout = layout_of(kw["layout"].cast<std::string>());
  c.num_blocks = get("num_blocks", 1);
  c.groups_per_block = get("groups_per_block", moe_a2a::kDefaultGroupsPerBlock);
  c.expert_alignment = get("expert_alignment", 1);
  c.fp8 = fp8_format_of(kw.contains("fp8") ? kw["fp8"].cast<std::string>() : "none");
  c.fp8_pow2_scales = get("fp8_pow2_scales", 0);
  c.dispatch_senders = get("dispatch_senders", moe_a2a::kAutoSenders);
  c.combine_senders = get("combine_senders", moe_a2a::kAutoSenders);
  return c;
}

// What validate_config's messages call each field: the AllToAll argument that sets it
// (python/moe_a2a/_arguments.py builds the config from them), which is what a Python user passed.
const char* argument_name(moe_a2a::ConfigField f) {
  using F = moe_a2a::ConfigField;
  static constexpr std::pair<F, const char*> kNames[] = {{F::kNumExperts, "num_experts"},
                                                         {F::kTopk, "experts_per_token"},
                                                         {F::kHidden, "hidden_dim"},
                                                         {F::kMaxTokens, "max_num_tokens"},
                                                         {F::kPaddedCapacity, "max_recv_tokens_per_expert"},
                                                         {F::kPackedCapacity, "max_recv_tokens"},
                                                         {F::kLayout, "layout"},
                                                         {F::kExpertAlignment, "expert_alignment"},
                                                         {F::kNumBlocks, "num_sms"},
                                                         {F::kDispatchSenders, "send_sms"},
                                                         {F::kCombineSenders, "send_sms"},
                                                         {F::kGroupsPerBlock, "groups_per_block"}};
  static_assert(std::size(kNames) == static_cast<size_t>(F::kCount), "a name for every field");
  for (const auto& [field, name] : kNames)
    if (field == f) return name;
  return moe_a2a::cxx_field_name(f);  // not reached: every field has its entry
}

// Device scratch for a self-test result of 64-bit words (Result: a struct of them), zeroed;
// synchronous, for tests and microbenchmarks only.
template <class Result = moe_a2a::SelftestResult>
struct ResultBuffer {
  static_assert(sizeof(Result) % sizeof(int64_t) == 0, "a result is 64-bit words");
  static constexpr int64_t kWords = sizeof(Result) / sizeof(int64_t);
  at::Tensor t;
  explicit ResultBuffer(int device)
      : t(at::zeros({kWords}, at::TensorOptions().device(at::kCUDA, device).dtype(at::kLong))) {}
  Result* ptr() { return reinterpret_cast<Result*>(t.data_ptr()); }
  std::vector<int64_t> read() {
    auto c = t.cpu();
    std::vector<int64_t> words(kWords);
    for (int64_t i = 0; i < kWords; ++i) words[i] = c[i].item<int64_t>();
    return words;
  }
};

#if defined(MOE_A2A_ENABLE_PROFILER)
constexpr bool kProfilerCompiledIn = true;

// One rank's profile as plain Python objects; python/moe_a2a/trace.py turns every rank's into
// one trace. Times stay in raw ticks (Python ints are exact) with the rate to convert them.
py::dict dump_to_python(const moe_a2a::ProfileDump& d) {
  py::list events;
  for (const auto& e : d.profile.events) events.append(py::make_tuple(e.block, e.wave, e.event, e.arg, e.start, e.end));
  auto samples = [&d](const std::vector<moe_a2a::ClockSample>& s) {
    py::list peers;  // peers[p] = [(t0, tp, t1), ...]; empty off rank 0 and for p = 0
    if (s.empty()) return peers;
    for (int p = 0; p < d.world; ++p) {
      py::list row;
      for (int i = 0; p > 0 && i < d.clock_iters; ++i) {
        const auto& c = s[static_cast<size_t>(p) * d.clock_iters + i];
        row.append(py::make_tuple(c.t0, c.peer, c.t1));
      }
      peers.append(row);
    }
    return peers;
  };
  py::dict out;
  out["rank"] = d.rank;
  out["world"] = d.world;
  out["clock_rate_hz"] = d.clock_rate_hz;
  out["num_blocks"] = d.num_blocks;
  out["waves_per_block"] = d.waves_per_block;
  out["capacity"] = d.capacity;
  out["attempted"] = d.profile.attempted;
  out["dropped"] = d.profile.dropped;
  out["invalid"] = d.profile.invalid;
  out["events"] = events;
  out["clock_before"] = samples(d.clock_before);
  out["clock_after"] = samples(d.clock_after);
  return out;
}
#else
constexpr bool kProfilerCompiledIn = false;

[[noreturn]] void no_profiler() {
  MOE_A2A_TORCH_CHECK(false,
                      "moe_a2a: this build has no in-kernel profiler; rebuild with it compiled in: "
                      "MOE_A2A_PROFILE=1 python setup.py build_ext --inplace --force "
                      "(or MOE_A2A_PROFILE=1 pip install --no-build-isolation -e .)");
  std::abort();
}
#endif

uint64_t ticks(const SymmetricHeap& h, double seconds) {
  return static_cast<uint64_t>(seconds * moe_a2a::wall_clock_rate_hz(h.device()));
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "moe_a2a compiled core: symmetric heap, EP engine, self-tests";

  py::register_exception<moe_a2a::Error>(m, "Error", PyExc_RuntimeError);

  py::class_<SymmetricHeap, std::shared_ptr<SymmetricHeap>>(m, "SymmetricHeap")
      .def(py::init<int, int, size_t, int>(), py::arg("rank"), py::arg("world"), py::arg("bytes"), py::arg("device"))
      .def("export_handle", [](const SymmetricHeap& h) { return py::bytes(h.export_handle()); })
      .def("open_peers", &SymmetricHeap::open_peers)
      .def("allocate", &SymmetricHeap::allocate, py::arg("bytes"), py::arg("align"))
      .def("fingerprint", &SymmetricHeap::fingerprint)
      .def("close", &SymmetricHeap::close, py::arg("timeout_s"),
           py::call_guard<py::gil_scoped_release>())  // waits for peers: other threads run meanwhile
      .def_property_readonly("used", &SymmetricHeap::used)
      .def_property_readonly("bytes", &SymmetricHeap::bytes)
      .def_property_readonly("rank", &SymmetricHeap::rank)
      .def_property_readonly("world", &SymmetricHeap::world)
      .def_property_readonly("device", &SymmetricHeap::device)
      .def_property_readonly("is_closed", &SymmetricHeap::is_closed)
      // A uint8 tensor over [offset, offset + nbytes) of `rank`'s heap, on the local device
      // (a peer's heap is reached through this process's IPC mapping of it).
      .def("tensor", [](const SymmetricHeap& h, int rank, size_t offset, size_t nbytes) {
        MOE_A2A_TORCH_CHECK(!h.is_closed(), "moe_a2a: SymmetricHeap is closed");
        MOE_A2A_TORCH_CHECK(h.is_open(), "moe_a2a: SymmetricHeap peers are not open yet");
        MOE_A2A_TORCH_CHECK(rank >= 0 && rank < h.world(), "moe_a2a: rank ", rank, " outside world of ", h.world());
        MOE_A2A_TORCH_CHECK(offset <= h.bytes() && nbytes <= h.bytes() - offset, "moe_a2a: [", offset, ", +", nbytes,
                            ") is outside the heap of ", h.bytes(), " bytes");
        return torch::from_blob(h.view().at(rank, offset), {static_cast<int64_t>(nbytes)},
                                at::TensorOptions().device(at::kCUDA, h.device()).dtype(at::kByte));
      });
  m.def("live_heaps", &SymmetricHeap::live_heaps);
  m.def("open_mappings", &SymmetricHeap::open_mappings);

  // ---- EP engine ----
  // The config helpers take the config's fields as keyword arguments (make_config): world, rank,
  // num_experts, topk, hidden, max_tokens, capacity, dtype, layout, num_blocks, groups_per_block,
  // expert_alignment, fp8 ("none", "e4m3fn", "e4m3fnuz"), fp8_pow2_scales, dispatch_senders, combine_senders.
  m.def("validate_config", [](const py::kwargs& kw) { return moe_a2a::validate(make_config(kw), argument_name); });
  m.def("default_capacity",
        [](size_t budget, const py::kwargs& kw) { return moe_a2a::default_expert_capacity(make_config(kw), budget); });
  m.def("ep_region_bytes", [](const py::kwargs& kw) { return make_config(kw).heap_layout().total; });
  m.def("create_engine",
        [](std::shared_ptr<SymmetricHeap> heap, size_t ep_offset, double timeout_s, const py::kwargs& kw) {
          EpConfig c = make_config(kw);
          MOE_A2A_TORCH_CHECK(c.world == heap->world() && c.rank == heap->rank(), "moe_a2a: config of rank ", c.rank,
                              " of ", c.world, " for the heap of rank ", heap->rank(), " of ", heap->world());
          const at::ScalarType st = token_dtype(kw["dtype"].cast<std::string>());
          auto engine =
              std::make_shared<moe_a2a::EpEngine>(c, moe_a2a::token_type(st), std::move(heap), ep_offset, timeout_s);
          return moe_a2a::register_engine(std::move(engine), st);
        });
  m.def("dispatch_output_names", &moe_a2a::dispatch_output_names);
  m.def(
      "engine_check", [](int64_t id) { moe_a2a::engine_by_id(id).check_errors(); },
      py::call_guard<py::gil_scoped_release>());  // may wait for an own error being written: other threads run
  m.def("engine_close", [](int64_t id) {
    moe_a2a::engine_by_id(id).close();
    moe_a2a::unregister_engine(id);
  });

  // ---- in-kernel profiler ----
  m.def("profiler_compiled_in", []() { return kProfilerCompiledIn; });
  m.def("profiler_event_names", []() {
    return std::vector<std::string>(std::begin(moe_a2a::kProfilerEventNames), std::end(moe_a2a::kProfilerEventNames));
  });
  m.def("profiler_event_arg_names", []() {
    return std::vector<std::string>(std::begin(moe_a2a::kProfilerEventArgNames),
                                    std::end(moe_a2a::kProfilerEventArgNames));
  });
  m.def("profiler_mailbox_bytes", &moe_a2a::clock_mailbox_bytes);
#if defined(MOE_A2A_ENABLE_PROFILER)
  m.def("engine_enable_profiler", [](int64_t id, uint32_t capacity, size_t mailbox_offset) {
    auto& e = moe_a2a::engine_by_id(id);
    const c10::cuda::CUDAGuard guard(e.heap().device());
    // The first clock sync waits for the other ranks (up to the AllToAll's timeout): without the GIL, so that the
    // process's other threads (a test's watchdog among them) run meanwhile.
    py::gil_scoped_release no_gil;
    e.enable_profiler(capacity, mailbox_offset);
  });
  m.def("engine_profile_collect", [](int64_t id) {
    auto& e = moe_a2a::engine_by_id(id);
    const c10::cuda::CUDAGuard guard(e.heap().device());
    moe_a2a::ProfileDump d;
    {
      py::gil_scoped_release no_gil;  // waits for the GPU and for the other ranks
      d = e.collect_profile(at::cuda::getCurrentCUDAStream(e.heap().device()).stream());
    }
    return dump_to_python(d);
  });
  m.def("engine_profile_reset", [](int64_t id) {
    auto& e = moe_a2a::engine_by_id(id);
    const c10::cuda::CUDAGuard guard(e.heap().device());
    e.reset_profile(at::cuda::getCurrentCUDAStream(e.heap().device()).stream());
  });
#else
  m.def("engine_enable_profiler", [](int64_t, uint32_t, size_t) { no_profiler(); });
  m.def("engine_profile_collect", [](int64_t) -> py::dict { no_profiler(); });
  m.def("engine_profile_reset", [](int64_t) { no_profiler(); });
#endif

  // ---- microbenchmarks (synchronous; benchmarks/microbench.py) ----
  m.def("mailbox_bytes", &moe_a2a::mailbox_bytes);
  m.def("message_passing", [](const SymmetricHeap& h, size_t mailbox_offset, int data_words, int iters, uint64_t base,
                              int mode, double timeout_s) {
    const c10::cuda::CUDAGuard guard(h.device());
    ResultBuffer<> r(h.device());
    moe_a2a::launch_message_passing(h.view(), mailbox_offset, data_words, iters, base,
                                    static_cast<moe_a2a::SyncMode>(mode), ticks(h, timeout_s), r.ptr(),
                                    at::cuda::getCurrentCUDAStream(h.device()).stream());
    const auto v = r.read();
    const double seconds = static_cast<double>(v[2]) / moe_a2a::wall_clock_rate_hz(h.device());
    return py::make_tuple(v[0], v[1], seconds);
  });
  m.attr("NUM_SYNC_MODES") = moe_a2a::kNumSyncModes;

  // ==== BEGIN floor_exchange (benchmarks: the machine's floor; csrc/heap/floor_exchange.h) ====
  // floor_exchange(heap, region_offset, bytes, blocks, flags_offset, workspace_offset, timeout_s):
  // one phase of the bare exchange on the current stream, asynchronous and graph-capturable.
  // All three offsets are in the symmetric heap (allocated collectively): region = `bytes`
  // bytes each rank receives, flags = floor_flags_bytes(blocks), workspace =
  // floor_workspace_bytes(blocks) (per-block epochs, then a count of timed-out waits; read it
  // after the run). flags and workspace must be zero on every rank before a sequence starts.
  m.def("floor_flags_bytes", &moe_a2a::floor_flags_bytes, py::arg("blocks"));
  m.def("floor_workspace_bytes", &moe_a2a::floor_workspace_bytes, py::arg("blocks"));
  m.def(
      "floor_exchange",
      [](const SymmetricHeap& h, size_t region_offset, size_t bytes, int blocks, size_t flags_offset,
         size_t workspace_offset, double timeout_s) {
        MOE_A2A_TORCH_CHECK(!h.is_closed() && h.is_open(), "moe_a2a: floor_exchange needs an open SymmetricHeap");
        const c10::cuda::CUDAGuard guard(h.device());
        moe_a2a::launch_floor_exchange(h.view(), region_offset, bytes, blocks, flags_offset, workspace_offset,
                                       ticks(h, timeout_s), at::cuda::getCurrentCUDAStream(h.device()).stream());
      },
      py::arg("heap"), py::arg("region_offset"), py::arg("bytes"), py::arg("blocks"), py::arg("flags_offset"),
      py::arg("workspace_offset"), py::arg("timeout_s"));
  // ==== END floor_exchange ====

  // ==== test hooks: only with MOE_A2A_TEST_HOOKS=1 (tools/gpu_run.sh builds so; a user's install does not) ====
  // What the GPU tests call and users never do: skip rounds, read the flagged words back, the
  // heap's pattern self-test, the fp8 arithmetic check. TEST_HOOKS says whether they are in.
  m.attr("TEST_HOOKS") = static_cast<bool>(MOE_A2A_TEST_HOOKS);
#if MOE_A2A_TEST_HOOKS
  m.def("engine_set_rounds_for_test", [](int64_t id, uint64_t rounds) {
    auto& e = moe_a2a::engine_by_id(id);
    const c10::cuda::CUDAGuard guard(e.heap().device());
    e.set_rounds_for_test(rounds);
  });
  // An id with this config (make_config's fields) and no engine, no GPU needed: the ops' Meta
  // kernels work with it (tests/python/cpu/test_op_outputs.py), the GPU kernels raise.
  m.def("register_shapes_for_test", [](const py::kwargs& kw) {
    const EpConfig c = make_config(kw);
    const std::string problem = moe_a2a::validate(c);
    MOE_A2A_TORCH_CHECK(problem.empty(), "moe_a2a: ", problem);
    return moe_a2a::register_shapes_only(c, token_dtype(kw["dtype"].cast<std::string>()));
  });
  m.def("forget_shapes_for_test", &moe_a2a::unregister_engine);
  // The address of an engine's host-mapped ErrorRecord (include/moe_a2a/errors.h), for a test that
  // writes one as a kernel would (tests/python/gpu/hooks.py, error_record).
  m.def("engine_error_record_for_test",
        [](int64_t id) { return reinterpret_cast<uintptr_t>(moe_a2a::engine_by_id(id).error_record_for_test()); });
  // (offset in an EP region, bytes) of comb_flagged, for a test that reads it back.
  m.def("ep_flagged_region", [](const py::kwargs& kw) {
    const EpConfig c = make_config(kw);
    return py::make_tuple(c.heap_layout().comb_flagged, c.flagged_region_bytes());
  });
  // (offset in an EP region, bytes) of recv_count, dispatch's flagged count words.
  m.def("ep_count_region", [](const py::kwargs& kw) {
    const EpConfig c = make_config(kw);
    return py::make_tuple(c.heap_layout().recv_count, c.recv_count_bytes());
  });
  m.attr("FLAGGED_TOKENS") = moe_a2a::kFlaggedTokens;
  m.attr("OWN_PLACED_COPY_TOKENS") = moe_a2a::kOwnPlacedCopyTokens;
  m.attr("DOUBLE_GROUPS_TOKENS") = moe_a2a::kDoubleGroupsTokens;  // EpConfig::num_groups doubles past it
  m.attr("UNUSED_SLOT_BIT") = moe_a2a::kUnusedSlotBit;            // dest_mask's bit of unused slot k: this + k
  m.def("put_pattern",
        [](const SymmetricHeap& h, size_t region_offset, size_t words, size_t flag_offset, uint64_t epoch) {
          const c10::cuda::CUDAGuard guard(h.device());
          moe_a2a::launch_put_pattern(h.view(), region_offset, words, flag_offset, epoch,
                                      at::cuda::getCurrentCUDAStream(h.device()).stream());
        });
  m.def("check_pattern", [](const SymmetricHeap& h, size_t region_offset, size_t words, size_t flag_offset,
                            uint64_t epoch, double timeout_s) {
    const c10::cuda::CUDAGuard guard(h.device());
    ResultBuffer<> r(h.device());
    moe_a2a::launch_check_pattern(h.view(), region_offset, words, flag_offset, epoch, ticks(h, timeout_s), r.ptr(),
                                  at::cuda::getCurrentCUDAStream(h.device()).stream());
    const auto v = r.read();
    return py::make_tuple(v[0], v[1]);
  });
  // fp8_device_check(format, device) -> (encode mismatches, first bad pattern or -1, amax mismatches, first bad
  // pattern or -1): dispatch's device fp8 arithmetic against fp8.h's on every fp32 bit pattern.
  m.def("fp8_device_check", [](const std::string& format, int device) {
    const moe_a2a::Fp8Format f = fp8_format_of(format);
    MOE_A2A_TORCH_CHECK(f != moe_a2a::Fp8Format::kNone, "moe_a2a: fp8_device_check needs e4m3fn or e4m3fnuz");
    const c10::cuda::CUDAGuard guard(device);
    ResultBuffer<moe_a2a::Fp8CheckResult> r(device);
    r.t.index_put_({1}, -1);  // first_bad_* start at ~0 (unsigned)
    r.t.index_put_({3}, -1);
    moe_a2a::launch_fp8_device_check(f, r.ptr(), at::cuda::getCurrentCUDAStream(device).stream());
    const auto v = r.read();
    return py::make_tuple(v[0], v[1], v[2], v[3]);
  });
#endif  // MOE_A2A_TEST_HOOKS
}
