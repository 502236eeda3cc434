"""The progress bar of long jobs (runs, indexing, packing), on stderr."""

from __future__ import annotations

from tqdm import tqdm


class ProgressBar(tqdm):  # type: ignore[type-arg]  # generic over what it iterates; only the monitor differs
    """tqdm without its monitor thread, which would outlive the bar (a line per shard or item needs none)."""

    monitor_interval = 0
