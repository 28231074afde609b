"""Each rank's clock mapped onto rank 0's, from the ping-pong samples taken before and after a run."""


def ticks_to_ns(ticks: int, rate_hz: int) -> int:
    return ticks * 1_000_000_000 // rate_hz  # Python ints: exact even for 64-bit tick counts


def fit_clock(samples, rate0: int, rate_peer: int):
    """The ping-pong sample with the shortest round trip, as {peer_ns, offset_ns, error_ns,
    rtt_ns}: offset = peer clock - rank-0 clock (ns), error <= half the round trip."""
    best = None
    for t0, tp, t1 in samples:
        a, b, p = ticks_to_ns(t0, rate0), ticks_to_ns(t1, rate0), ticks_to_ns(tp, rate_peer)
        if t0 == 0 or b < a:
            continue  # unfilled or impossible sample
        if best is None or b - a < best["rtt_ns"]:
            best = {"peer_ns": p, "offset_ns": p - (a + (b - a) // 2), "rtt_ns": b - a, "error_ns": (b - a) / 2}
    if best is not None:
        best["samples"] = len(samples)
    return best


class ClockMap:
    """Maps a rank's local ns to rank 0's ns: the offset measured before and after the run,
    interpolated linearly (constant drift) in between and extrapolated outside."""

    def __init__(self, before=None, after=None):
        fits = [f for f in (before, after) if f is not None]
        self.before, self.after = before, after
        self.offset0 = fits[0]["offset_ns"] if fits else 0
        self.at0 = fits[0]["peer_ns"] if fits else 0
        self.slope = 0.0
        if len(fits) == 2 and fits[1]["peer_ns"] != fits[0]["peer_ns"]:
            self.slope = (fits[1]["offset_ns"] - fits[0]["offset_ns"]) / (fits[1]["peer_ns"] - fits[0]["peer_ns"])
        # Between two bounded estimates a linear interpolation is bounded by the worse one.
        self.error_ns = max((f["error_ns"] for f in fits), default=0.0)

    def __call__(self, ns: int) -> int:
        return ns - self.offset0 - round(self.slope * (ns - self.at0))

    def describe(self, rate_hz: int):
        return {
            "offset_before_ns": self.before and self.before["offset_ns"],
            "error_before_ns": self.before and self.before["error_ns"],
            "offset_after_ns": self.after and self.after["offset_ns"],
            "error_after_ns": self.after and self.after["error_ns"],
            "drift_ppm": self.slope * 1e6,
            "error_ns": self.error_ns,
            "clock_rate_hz": rate_hz,
        }
