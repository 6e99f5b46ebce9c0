"""``smoke.png``: what the verdicts judged, drawn. Loss per step with the first-10 and last-10 means the loss verdict
compares and the verdict itself; the learning rate the scheduler applied; memory per step on an axis from zero with
the band TRN604 tolerates (so allocator noise of 10 MiB does not look like a leak)."""

from __future__ import annotations

from pathlib import Path

GiB = 2 ** 30


def make_plot(path: Path, rows_by_rank: dict[int, list[dict]], memory_label: str, loss_verdict: dict | None = None,
              memory_band: dict[int, tuple[float, float]] | None = None) -> Path | None:
    """Write the PNG of :func:`figure` to ``path``; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = figure(rows_by_rank, memory_label, loss_verdict, memory_band)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def figure(rows_by_rank: dict[int, list[dict]], memory_label: str, loss_verdict: dict | None = None,
           memory_band: dict[int, tuple[float, float]] | None = None):
    """The three panels (loss, learning rate, memory) as a matplotlib Figure. ``loss_verdict``: {"window", "first",
    "last", "status", "title"} of the loss verdict; ``memory_band``: per rank, (the first half's peak, the highest
    second-half peak TRN604 accepts), bytes."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax3, ax2) = plt.subplots(1, 3, figsize=(14, 3.8))
    rows0 = rows_by_rank.get(0, [])
    steps = [r["step"] for r in rows0]
    ax1.plot(steps, [r["loss"] for r in rows0], color="tab:blue", label="loss")
    if loss_verdict and steps:
        w = loss_verdict["window"]
        ax1.hlines(loss_verdict["first"], steps[0], steps[min(w, len(steps)) - 1], colors="tab:green", linewidth=2.5,
                   label=f"mean of first {w}: {loss_verdict['first']:.4f}")
        ax1.hlines(loss_verdict["last"], steps[-min(w, len(steps))], steps[-1], colors="tab:red", linewidth=2.5,
                   label=f"mean of last {w}: {loss_verdict['last']:.4f}")
        ax1.set_title(f"loss: {loss_verdict['status']} ({loss_verdict['title']})", fontsize=9)
    else:
        ax1.set_title("loss")
    ax1.set_xlabel("optimizer step")
    ax1.set_ylabel("loss (mean over ranks)")
    ax1.legend(fontsize=7)
    ax3.plot(steps, [r.get("lr", 0.0) for r in rows0], color="tab:purple")
    ax3.set_xlabel("optimizer step")
    ax3.set_ylabel("learning rate")
    ax3.set_title("learning rate applied (param group 0)")
    ax3.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for rank, rows in sorted(rows_by_rank.items()):
        line, = ax2.plot([r["step"] for r in rows], [r["mem_allocated_bytes"] / GiB for r in rows], label=f"rank {rank}")
        if any("nvml_used_bytes" in r for r in rows):
            ax2.plot([r["step"] for r in rows], [r.get("nvml_used_bytes", 0) / GiB for r in rows], "--",
                     color=line.get_color(), label=f"rank {rank} NVML used")
        if memory_band and rank in memory_band and rows:
            low, high = memory_band[rank]
            ax2.fill_between([rows[0]["step"], rows[-1]["step"]], low / GiB, high / GiB, color=line.get_color(),
                             alpha=0.12, label=f"rank {rank}: TRN604 accepts up to {high / GiB:.2f} GiB")
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("optimizer step")
    ax2.set_ylabel("GiB")
    ax2.set_title(memory_label)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    return fig
