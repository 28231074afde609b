"""A timeline per rank drawn into a PNG (matplotlib), for readers without Perfetto."""

from .events import complete_events, rank_names


def plot_png(trace, path) -> None:
    """A timeline per rank (y: track, x: time), for readers without Perfetto."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = complete_events(trace)
    pids = sorted(rank_names(trace)) or sorted({e["pid"] for e in xs})
    names = sorted({e["name"] for e in xs}, key=lambda n: ("." in n, n))
    colors = {n: plt.cm.tab20(i % 20) for i, n in enumerate(names)}
    fig, axes = plt.subplots(len(pids), 1, figsize=(16, 3 + 3 * len(pids)), sharex=True, squeeze=False)
    for ax, pid in zip(axes[:, 0], pids):
        for n in names:
            bars = {}
            for e in xs:
                if e["pid"] == pid and e["name"] == n:
                    bars.setdefault(e["tid"], []).append((e["ts"], max(e["dur"], 1e-3)))
            kernel = "." not in n
            for tid, b in bars.items():
                ax.broken_barh(
                    b,
                    (tid - 0.5, 1.0 if kernel else 0.7),
                    facecolors=colors[n],
                    alpha=0.35 if kernel else 0.9,
                    linewidth=0,
                )
        ax.set_ylabel(f"rank {pid - 1}\ntrack (block x waves + wave)")
        ax.invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[n], alpha=0.35 if "." not in n else 0.9) for n in names]
    fig.legend(handles, names, loc="upper center", ncol=4, fontsize=8)
    axes[-1, 0].set_xlabel("time (us, rank 0's clock)")
    err = trace.get("moe_a2a", {}).get("clock_alignment_error_us")
    if err is not None:
        axes[0, 0].set_title(f"clock alignment error <= {err:.2f} us", fontsize=9, loc="right")
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(path, dpi=110)
    plt.close(fig)
