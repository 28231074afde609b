// The one table of profiler events. C++ gets the enum from it; Python gets the names through
// _C.profiler_event_names() / profiler_event_arg_names(), and the exporter writes them into
// every trace, so trace tools never need the extension.
//
// X(enum name, trace name, meaning of the record's argument)
// Naming rule the trace tools rely on: a kernel's whole span is named after the kernel
// ("dispatch_send"); a stage inside it is "<kernel>.<stage>". Append new events at the end:
// ids are stored in records.
#pragma once

#include <cstdint>

#define MOE_A2A_PROFILER_EVENTS(X)                                                         \
  X(kDispatchSend, "dispatch_send", "")                  /* whole kernel, every wave */   \
  X(kDispatchSendRoute, "dispatch_send.route", "")       /* routing + slot reservation */ \
  X(kDispatchSendToken, "dispatch_send.token", "token")  /* one (token, chunk) copy */     \
  X(kDispatchSendCounts, "dispatch_send.count_exchange", "published") /* 1 = last block */ \
  X(kDispatchRecv, "dispatch_recv", "")                                                    \
  X(kDispatchRecvWait, "dispatch_recv.wait", "peer")     /* until the last count arrived */ \
  X(kDispatchRecvPlace, "dispatch_recv.place", "row")    /* expert positions of a batch */ \
  X(kDispatchRecvCopy, "dispatch_recv.copy", "peer")     /* one (row, chunk) from peer */   \
  X(kCombineSend, "combine_send", "")                                                      \
  X(kCombineSendGather, "combine_send.gather", "row")    /* metadata of a batch */         \
  X(kCombineSendCopy, "combine_send.copy", "peer")       /* one (row, chunk) back to peer */ \
  X(kCombineSendPublish, "combine_send.publish", "published")                              \
  X(kCombineRecv, "combine_recv", "")                                                      \
  X(kCombineRecvWait, "combine_recv.wait", "peer")       /* until the last partial arrived */ \
  X(kCombineRecvReduce, "combine_recv.reduce", "token")  /* one (token, chunk) sum */     \
  X(kOutputGradSend, "output_grad_send", "")             /* backward of combine */        \
  X(kOutputGradRecv, "output_grad_recv", "")                                               \
  X(kWeightGradRecv, "weight_grad_recv", "")

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
