"""The stream's two plots: the consumer's wait per batch, and producer vs consumer over time."""

from __future__ import annotations

from pathlib import Path

from loaderfactory.components.stream.parts import Timeline
from loaderfactory.report import plot_waits

_TIMELINE_SPANS = 400
"""Intervals drawn per row of the timeline (the first ones); more would be a solid bar."""


def plot_stream(timeline: Timeline, name: str, out_dir: Path) -> list[Path]:
    """Write ``<name>_wait_hist.png`` and ``<name>_timeline.png``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    waits = timeline.waits()
    if waits:
        paths.append(plot_waits(waits, out_dir / f"{name}_wait_hist.png"))
    producer = list(timeline.producer)[:_TIMELINE_SPANS]
    consumer = list(timeline.consumer)[:_TIMELINE_SPANS]
    if not (producer or consumer):
        return paths
    origin = min(start for start, _ in producer + consumer)
    fig, ax = plt.subplots(figsize=(9, 2.6))
    for row, (spans, colour) in enumerate(((producer, "#228833"), (consumer, "#cc6677"))):
        bars = [((start - origin) * 1e3, max((end - start) * 1e3, 1e-3)) for start, end in spans]
        ax.broken_barh(bars, (row * 10 + 1, 8), facecolors=colour)
    ax.set_yticks([5, 15], labels=["producer: pulls a batch", "consumer: waits"])
    ax.set_xlabel("time (ms)")
    ax.set_title(f"stream {name!r}: first {max(len(producer), len(consumer))} batches")
    fig.tight_layout()
    path = out_dir / f"{name}_timeline.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
    return paths
