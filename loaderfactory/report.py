"""The command-line run's report: a table on the terminal and JSON on disk (its figure is drawn by
:mod:`loaderfactory.run_figure`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_ROWS = (
    ("batches", "batches", ""),
    ("items", "items", ""),
    ("wall_s", "wall time", "s"),
    ("batches_per_s", "batches/s", ""),
    ("items_per_s", "items/s", ""),
    ("wait_total_s", "consumer wait, total", "s"),
    ("wait_p50_ms", "consumer wait per batch, p50", "ms"),
    ("wait_p99_ms", "consumer wait per batch, p99", "ms"),
    ("peak_rss_mb", "peak memory, this process (RSS)", "MiB"),
    ("peak_memory_mb", "peak memory with workers ({measure})", "MiB"),
    ("peak_growth_mb", "memory the loader added at peak ({measure})", "MiB"),
)
"""Report key, label, unit. ``{measure}`` is the report's ``memory_measure``: PSS counts a page that
forked workers share with the main process once, where a sum of RSS counts it once per process."""


def format_report(summary: dict[str, Any]) -> str:
    """The headline figures as an aligned two-column table; an interrupted run says so first."""
    measure = str(summary.get("memory_measure", "rss")).upper()
    rows = [
        (label.format(measure=measure), f"{summary.get(key)} {unit}")
        for key, label, unit in _ROWS
        if key in summary
    ]
    rows += _shards_rows(summary.get("shards"))
    rows += [
        (f"mixture {name}: drawn / target", f"{figures['drawn']} / {figures['target']}")
        for name, figures in (summary.get("mixture") or {}).items()
    ]
    width = max((len(label) for label, _ in rows), default=0)
    lines = [f"{label:<{width}}  {value}".rstrip() for label, value in rows]
    if summary.get("interrupted"):
        lines.insert(0, "interrupted (Ctrl-C): the figures cover the batches drawn until then")
    return "\n".join(lines)


def _shards_rows(shards: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The report's ``shards`` section as rows: what reading the shards cost, all workers together."""
    if not shards:
        return []
    mib = 2**20
    note = [("shards: note", str(shards["note"]))] if shards.get("note") else []
    return [
        ("shards opened", str(shards["shards_opened"])),
        (
            "shard bytes read (remote + local)",
            f"{shards['bytes_read_remote'] / mib:.1f} + {shards['bytes_read_local'] / mib:.1f} MiB",
        ),
        ("shard fetch wait", f"{shards['fetch_wait_s']} s"),
        (
            "shard cache hits / fetches / evictions",
            f"{shards['cache_hits']} / {shards['cache_fetches']} / {shards['cache_evictions']}",
        ),
        ("shard read retries", str(shards["retries"])),
        *note,
    ]


def write_report(summary: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return path
