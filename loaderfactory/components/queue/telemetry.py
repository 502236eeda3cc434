"""What a :class:`~loaderfactory.components.queue.dataset.QueueDataset` records: draws per item,
fill level and the age of drawn items, summarised for the run report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from loaderfactory.components.queue.entry import Entry
from loaderfactory.components.queue.store import QueueStore
from loaderfactory.components.state import StateFieldError, require_int, require_int_list, require_keys

MAX_SAMPLES = 1_000_000
"""Per-draw records kept with ``log_sampling`` (8 bytes each); later draws only update the counts."""


class QueueTelemetry:
    """Counts draws per dataset index always; with ``log_sampling`` also the fill level per draw
    and the age (seconds since it was loaded) of every drawn item."""

    def __init__(self, length: int, log_sampling: bool) -> None:
        self.counts = np.zeros(length, dtype=np.int64)
        """Draws per dataset index. The store's :class:`~loaderfactory.components.queue.draws.LeastDrawn`
        adds each draw to this very array (it draws the least drawn items first), so it is only
        ever updated in place."""
        self.log_sampling = log_sampling
        self.draws = 0
        self.fill: list[int] = []
        self.fill_mb: list[float] = []
        self.ages: list[float] = []
        self.loads = 0
        self.evictions = 0
        self.peak_bytes = 0
        self.fill_wait_s: float | None = None
        self.budget_bytes: int | None = None
        self._live: QueueStore | None = None

    def record_draw(self, entries: Sequence[Entry], held: int, held_bytes: int, now: float) -> None:
        """A draw of ``entries`` (already added to :attr:`counts` by the store)."""
        self.draws += 1
        if self.log_sampling and len(self.fill) < MAX_SAMPLES:
            self.fill.append(held)
            self.fill_mb.append(held_bytes / 1e6)
            self.ages.extend(now - entry.born for entry in entries)

    def watch(self, store: QueueStore) -> None:
        self._live = store
        self.budget_bytes = store.budget

    def absorb(self, store: QueueStore) -> None:
        """Add a finished run's loads, evictions and peak memory."""
        self.loads += store.loads
        self.evictions += store.evictions
        self.peak_bytes = max(self.peak_bytes, store.peak_bytes)
        if self._live is store:
            self._live = None

    def state_dict(self) -> dict[str, Any]:
        return {"draws": self.draws, "sampling_counts": self.counts.tolist()}

    def load_state_dict(self, state: Mapping[str, Any], owner: str = "queue") -> None:
        """Restore the draws and the per-item counts; ``owner`` names the queue in errors.

        Raises:
            ResumeError: a field is missing, of the wrong type, negative, or the counts are for a
                dataset of another length.
        """
        require_keys(owner, state, ("draws", "sampling_counts"))
        draws = require_int(owner, state, "draws")
        counts = _counts(owner, state["sampling_counts"], self.counts.size)
        self.counts[...] = counts
        self.draws = draws

    def ratio(self) -> float | None:
        """Most over least drawn item; ``None`` while some item was never drawn."""
        low = int(self.counts.min()) if self.counts.size else 0
        return float(self.counts.max()) / low if low > 0 else None

    def summary(self) -> dict[str, Any]:
        live = self._live
        report: dict[str, Any] = {
            "draws": self.draws,
            "loads": self.loads + (live.loads if live else 0),
            "evictions": self.evictions + (live.evictions if live else 0),
            "peak_held_mb": round(max(self.peak_bytes, live.peak_bytes if live else 0) / 1e6, 3),
            "sampling_max": int(self.counts.max()) if self.draws else 0,
            "sampling_min": int(self.counts.min()) if self.draws else 0,
            "sampling_max_min_ratio": None if self.ratio() is None else round(self.ratio() or 0.0, 3),
            "never_drawn": int((self.counts == 0).sum()),
        }
        if self.fill_wait_s is not None:
            report["fill_wait_s"] = round(self.fill_wait_s, 3)
        if self.fill:
            fill = np.asarray(self.fill)
            report["fill_items"] = {
                "min": int(fill.min()),
                "mean": round(float(fill.mean()), 2),
                "max": int(fill.max()),
            }
        if self.ages:
            ages = np.asarray(self.ages)
            report["age_s"] = {
                q: round(float(np.percentile(ages, p)), 4) for q, p in (("p50", 50), ("p99", 99))
            }
            report["age_s"]["max"] = round(float(ages.max()), 4)
        return report


def _counts(owner: str, saved: Any, length: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Saved per-item draw counts as an array, or :class:`StateFieldError`; vectorised for large datasets."""
    if not isinstance(saved, list | tuple) or len(saved) != length:
        shown = f"{len(saved)} entries" if isinstance(saved, list | tuple) else repr(saved)
        raise StateFieldError(
            owner,
            "sampling_counts",
            f"must be a list of {length} ints >= 0 (one per dataset item), got {shown}",
        )
    try:
        counts = np.asarray(saved) if saved else np.zeros(0, dtype=np.int64)
    except ValueError:  # ragged: an entry is a list
        counts = np.zeros(0, dtype=object)
    integral = counts.ndim == 1 and counts.size == length and counts.dtype.kind in "iu"
    if integral and (not counts.size or (counts.min() >= 0 and counts.max() <= np.iinfo(np.int64).max)):
        return counts.astype(np.int64)
    # The slow path names the first entry that is not a count (None, a float, a negative number).
    checked = require_int_list(owner, {"sampling_counts": saved}, "sampling_counts")
    try:
        return np.asarray(checked, dtype=np.int64)
    except OverflowError:
        raise StateFieldError(owner, "sampling_counts", "holds a count beyond 64 bits") from None
