// The one table of profiler events. C++ gets the enum from it; Python gets the names through
// _C.profiler_event_names() / profiler_event_arg_names(), and the exporter writes them into
// every trace, so trace tools never need the extension.
//
// X(enum name, trace name, meaning of the record's argument)
// Naming rule the trace tools rely on: a kernel's whole span is named after the kernel
// ("dispatch"); a stage inside it is "<kernel>.<stage>". Ids are stored in records: a trace
// is read with the names of the build that wrote it (the exporter writes them into the trace).
#pragma once

#include <cstdint>

#define MOE_A2A_PROFILER_EVENTS(X)                                                                                  \
  X(kDispatch, "dispatch", "")                           /* whole kernel, every wave */                             \
  X(kDispatchCounts, "dispatch.counts", "tokens")        /* counting block: counts to all */                        \
  X(kDispatchCountsOut, "dispatch.counts_out", "tokens") /* its stores of the counts (flagged words) */             \
  X(kDispatchRoute, "dispatch.route", "group")           /* routing + slots of a token group */                     \
  X(kDispatchMeta, "dispatch.meta", "group")             /* the group's metadata to its ranks */                    \
  X(kDispatchSendRow, "dispatch.send", "token")          /* one (token, chunk) to its ranks */                      \
  X(kDispatchPublish, "dispatch.publish", "group")       /* barrier + the group's signals */                        \
  X(kDispatchWaitCounts, "dispatch.wait_counts", "peer") /* until the last count arrived */                         \
  X(kDispatchSegments, "dispatch.segments", "experts")   /* the local experts' segments */                          \
  X(kDispatchWaitRows, "dispatch.wait_rows", "peer")     /* until a group's rows arrived */                         \
  X(kDispatchBatch, "dispatch.batch", "sources")         /* the arrived sources' rows, one batch */                 \
  X(kDispatchPlace, "dispatch.place", "sources")         /* expert positions of a batch */                          \
  X(kDispatchCopy, "dispatch.copy", "row")               /* one (row, chunk) to its experts */                      \
  X(kCombine, "combine", "")                                                                                        \
  X(kCombineRoute, "combine.route", "rows")        /* a batch's rows and positions (route loads) */                 \
  X(kCombineSendRow, "combine.send", "peer")       /* one (row, chunk) back to its rank */                          \
  X(kCombinePublish, "combine.publish", "sources") /* barrier + the unit's partial signals */                       \
  X(kCombineWait, "combine.wait", "peer")          /* until a unit's partials arrived */                            \
  X(kCombineReduce, "combine.reduce", "token")     /* one (token, chunk) sum */                                     \
  X(kCombineBackward, "combine_backward", "")                                                                       \
  X(kCombineBackwardSend, "combine_backward.send", "group")               /* a group's output grads to its ranks */ \
  X(kCombineBackwardWait, "combine_backward.wait", "peer")                /* until a source's group arrived */      \
  X(kCombineBackwardAnswer, "combine_backward.answer", "source")          /* grads of a source group's rows */      \
  X(kCombineBackwardWaitWeights, "combine_backward.wait_weights", "peer") /* until weight grads arrived */

namespace moe_a2a {

enum class ProfilerEvent : uint16_t {
#define MOE_A2A_PROFILER_ENUM(id, name, arg) id,
  MOE_A2A_PROFILER_EVENTS(MOE_A2A_PROFILER_ENUM)
#undef MOE_A2A_PROFILER_ENUM
      kCount
};

inline constexpr int kNumProfilerEvents = static_cast<int>(ProfilerEvent::kCount);

inline constexpr const char* kProfilerEventNames[] = {
#define MOE_A2A_PROFILER_NAME(id, name, arg) name,
    MOE_A2A_PROFILER_EVENTS(MOE_A2A_PROFILER_NAME)
#undef MOE_A2A_PROFILER_NAME
};

inline constexpr const char* kProfilerEventArgNames[] = {
#define MOE_A2A_PROFILER_ARG(id, name, arg) arg,
    MOE_A2A_PROFILER_EVENTS(MOE_A2A_PROFILER_ARG)
#undef MOE_A2A_PROFILER_ARG
};

static_assert(sizeof(kProfilerEventNames) / sizeof(kProfilerEventNames[0]) == kNumProfilerEvents);

}  // namespace moe_a2a
