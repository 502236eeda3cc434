"""The run report's figure: is data loading the bottleneck, when, and in which stage.

One figure per run, built from plain numbers (:class:`RunRecord`), so it can be drawn and tested
without a loader. Its panels, top to bottom, each only where the run has what it shows:

- the wait for each batch over time, on a log axis (always);
- the seconds each timed stage took (when a component beyond the consumer times one);
- the queue's fill in items and bytes, against its capacity and RAM budget (runs with a queue);
- shards opened and fetched over time (runs reading shards);
- each source's share of a mixture over the steps, against its target (runs reading a mixture).

The title names the config's key facts and the share of the run spent waiting for data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from loaderfactory.mixture.shares import SharesOverSteps, draw_shares
from loaderfactory.panels import label_panel

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WAIT_TITLE = "wait for each batch"
STAGES_TITLE = "time per stage"
QUEUE_TITLE = "queue fill"
SHARDS_TITLE = "shards read"
SINCE_START = "seconds since the first batch was asked for"

_DOTS_AT_MOST = 20_000
"""Batches drawn as dots; a longer run is drawn as the median and maximum wait per time bin."""
_BINS = 500
_SMALLEST_WAIT_MS = 1e-3
"""Waits shorter than a microsecond are drawn at one: a log axis has no zero."""


@dataclass(frozen=True)
class QueueFill:
    """A queue's fill sampled over a run: seconds since the run began, items and bytes held."""

    times: Sequence[float]
    items: Sequence[float]
    held_bytes: Sequence[float]
    capacity: int
    budget_bytes: int


@dataclass(frozen=True)
class ShardReads:
    """Shards opened and fetched into the cache so far, sampled over a run (all workers together)."""

    times: Sequence[float]
    opened: Sequence[float]
    fetched: Sequence[float]


@dataclass(frozen=True)
class RunRecord:
    """What the figure draws. Times are seconds since the loader began its first pass.

    ``stages`` maps a stage's label to its seconds (summed over the stage's threads and processes);
    the consumer's own two (waiting, and its step between batches) are added from the waits.
    """

    title: str
    arrivals: Sequence[float]
    waits: Sequence[float]
    wall_s: float
    pass_starts: Sequence[float] = ()
    stages: Mapping[str, float] = field(default_factory=dict)
    queue: QueueFill | None = None
    shards: ShardReads | None = None
    mixture: SharesOverSteps | None = None

    @property
    def wait_total_s(self) -> float:
        return float(np.sum(self.waits)) if len(self.waits) else 0.0

    @property
    def wait_share(self) -> float:
        """The share of the run's wall time the consumer spent waiting for batches."""
        return self.wait_total_s / self.wall_s if self.wall_s > 0 else 0.0


def build_run_figure(record: RunRecord) -> Figure:
    """The figure for ``record``: one panel per question the run can answer (see the module)."""
    from matplotlib.figure import Figure

    panels: list[tuple[bool, Callable[[Axes], None]]] = [(True, lambda ax: _draw_waits(ax, record))]
    if record.stages:
        panels.append((False, lambda ax: _draw_stages(ax, record)))
    queue, shards = record.queue, record.shards
    if queue is not None and len(queue.times):
        panels.append((True, lambda ax: _draw_queue(ax, queue)))
    if shards is not None and len(shards.times):
        panels.append((True, lambda ax: _draw_shards(ax, shards)))
    mixture = record.mixture
    if mixture is not None and len(mixture.steps):
        panels.append((False, lambda ax: draw_shares(ax, mixture)))
    fig = Figure(figsize=(9, 1.2 + 2.6 * len(panels)), layout="constrained")
    first: Axes | None = None  # the panels over time share their time axis
    for row, (over_time, draw) in enumerate(panels, start=1):
        ax = fig.add_subplot(len(panels), 1, row, sharex=first if over_time else None)
        if over_time and first is None:
            first = ax
        draw(ax)
    if first is not None:
        first.set_xlim(left=min(0.0, first.get_xlim()[0]))
    share = record.wait_share
    fig.suptitle(
        f"{_wrapped(record.title)}\nwaiting for data: {share:.1%} of the run"
        f" ({record.wait_total_s:.3g} s of {record.wall_s:.3g} s)",
        fontsize=11,
    )
    return fig


def save_run_figure(record: RunRecord, path: Path) -> Path:
    """Write :func:`build_run_figure`'s figure as a PNG; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    build_run_figure(record).savefig(path, dpi=80)
    return path


def _draw_waits(ax: Axes, record: RunRecord) -> None:
    times = np.asarray(record.arrivals, dtype=float)
    waits = np.maximum(np.asarray(record.waits, dtype=float) * 1e3, _SMALLEST_WAIT_MS)
    if len(waits) <= _DOTS_AT_MOST:
        ax.plot(times, waits, ".", markersize=3, color="#4477aa", alpha=0.6, label="one batch")
    else:
        edges = np.linspace(times[0], times[-1], _BINS + 1)
        bins = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, _BINS - 1)
        centres, medians, peaks = [], [], []
        for number in np.unique(bins):
            chosen = waits[bins == number]
            centres.append((edges[number] + edges[number + 1]) / 2)
            medians.append(float(np.median(chosen)))
            peaks.append(float(chosen.max()))
        ax.plot(centres, peaks, color="#cc6677", linewidth=1, label="longest in each time bin")
        ax.plot(centres, medians, color="#4477aa", linewidth=1, label="median in each time bin")
    for percent, style in ((50, "--"), (99, ":")):
        level = float(np.percentile(waits, percent)) if len(waits) else _SMALLEST_WAIT_MS
        ax.axhline(level, color="k", linestyle=style, linewidth=1, label=f"p{percent} {level:.3g} ms")
    for start in record.pass_starts[1:]:
        ax.axvline(start, color="#999999", linestyle="-.", linewidth=1)
    ax.set_yscale("log")
    passes = (
        f"; dash-dot lines: new passes ({len(record.pass_starts)} in all)"
        if len(record.pass_starts) > 1
        else ""
    )
    title = f"{WAIT_TITLE} (high dots: the step waited for data){passes}"
    label_panel(ax, title, SINCE_START, "wait (ms, log scale)", legend="upper right")


def _draw_stages(ax: Axes, record: RunRecord) -> None:
    wait = record.wait_total_s
    stages = {
        "consumer: waiting for batches": wait,
        "consumer: its step, between batches": max(0.0, record.wall_s - wait),
        **record.stages,
    }
    # Labels sit above their bars, inside the panel: as tick labels they would narrow every panel.
    rows = range(len(stages) - 1, -1, -1)
    ax.barh(list(rows), list(stages.values()), height=0.35, color="#228833")
    for row, (label, seconds) in zip(rows, stages.items(), strict=True):
        ax.text(0, row + 0.22, f"{label}: {seconds:.3g} s", fontsize=8, va="bottom")
    ax.set_yticks([])
    ax.set_ylim(-0.5, len(stages) - 0.2)
    ax.axvline(
        record.wall_s, color="k", linestyle="--", linewidth=1, label=f"wall time {record.wall_s:.3g} s"
    )
    label_panel(ax, f"{STAGES_TITLE} (summed over a stage's threads and processes)", "seconds", "")


def _draw_queue(ax: Axes, queue: QueueFill) -> None:
    items = 100 * np.asarray(queue.items, dtype=float) / max(queue.capacity, 1)
    held = 100 * np.asarray(queue.held_bytes, dtype=float) / max(queue.budget_bytes, 1)
    ax.step(queue.times, items, where="post", color="#ee7733", label=f"items, of capacity {queue.capacity}")
    budget = _megabytes(queue.budget_bytes)
    peak = _megabytes(max(queue.held_bytes, default=0))
    ax.step(
        queue.times, held, where="post", color="#4477aa", label=f"bytes, of budget {budget} (peak {peak})"
    )
    ax.set_ylim(0, 105)
    title = f"{QUEUE_TITLE} (a full queue kept up; an empty one made the step wait)"
    label_panel(ax, title, SINCE_START, "% of the limit", legend="lower right")


def _draw_shards(ax: Axes, shards: ShardReads) -> None:
    ax.step(shards.times, shards.opened, where="post", color="#4477aa", label="opened")
    if max(shards.fetched, default=0) > 0:
        ax.step(shards.times, shards.fetched, where="post", color="#cc6677", label="fetched into the cache")
    ax.set_ylim(bottom=0)
    title = f"{SHARDS_TITLE} (so far, all workers together; steep: many opens)"
    label_panel(ax, title, SINCE_START, "shards", legend="lower right")


def _megabytes(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.3g} MB"


def _wrapped(title: str, width: int = 100) -> str:
    """``title`` on lines of at most ``width`` characters, broken after its `` · `` separators."""
    lines = [""]
    for part in title.split(" · "):
        joined = f"{lines[-1]} · {part}" if lines[-1] else part
        if len(joined) > width and lines[-1]:
            lines.append(part)
        else:
            lines[-1] = joined
    return "\n".join(lines)
