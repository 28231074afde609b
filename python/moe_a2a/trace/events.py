"""What every part of moe_a2a.trace shares: the kernels' names and the trace's complete events."""

# The kernels in pipeline order (a forward round, then the backward of combine's);
# tests/python/cpu/test_trace.py checks this against
# include/moe_a2a/profiler_events.h, the table the names come from.
KERNELS = ("dispatch", "combine", "combine_backward")
TRACE_VERSION = 1


def kernel_of(name: str) -> str:
    """'dispatch.wait_rows' -> 'dispatch'; a kernel's own span is named after it."""
    return name.split(".", 1)[0]


def complete_events(trace):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


def span_ns(e):
    """An event's (start, end) in integer ns from the trace's origin."""
    s = round(e["ts"] * 1e3)
    return s, s + round(e["dur"] * 1e3)


def rank_names(trace):
    """{pid: 'rank N'} from the metadata events."""
    return {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
