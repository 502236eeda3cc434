"""What a loader measured while it ran: throughput, consumer wait, memory."""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import psutil


def _unix_resource() -> ModuleType | None:
    try:
        return importlib.import_module("resource")
    except ImportError:  # Windows has no resource module
        return None


_resource = _unix_resource()


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB."""
    if _resource is None:
        info = psutil.Process().memory_info()
        return float(getattr(info, "peak_wset", info.rss)) / 2**20  # Windows' peak working set
    peak = _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss
    return float(peak) / 2**20 if sys.platform == "darwin" else float(peak) / 2**10


@dataclass
class LoaderStats:
    """Per-batch consumer wait and counts, filled in by :class:`~loaderfactory.loader.Loader`."""

    batches: int = 0
    items: int = 0
    waits: list[float] = field(default_factory=list)
    started: float | None = None
    finished: float | None = None

    def start(self) -> None:
        if self.started is None:
            self.started = time.perf_counter()

    def record(self, wait: float, items: int) -> None:
        self.batches += 1
        self.items += items
        self.waits.append(wait)
        self.finished = time.perf_counter()

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]  # dataclass re-initialisation to defaults

    @property
    def wall_s(self) -> float:
        if self.started is None or self.finished is None:
            return 0.0
        return self.finished - self.started

    def summary(self) -> dict[str, Any]:
        """The figures the report prints, as plain JSON-ready numbers."""
        waits = np.asarray(self.waits) if self.waits else np.zeros(1)
        wall = self.wall_s
        return {
            "batches": self.batches,
            "items": self.items,
            "wall_s": round(wall, 4),
            "batches_per_s": round(self.batches / wall, 2) if wall > 0 else None,
            "items_per_s": round(self.items / wall, 2) if wall > 0 else None,
            "wait_total_s": round(float(np.sum(waits)), 4),
            "wait_p50_ms": round(float(np.percentile(waits, 50)) * 1e3, 3),
            "wait_p99_ms": round(float(np.percentile(waits, 99)) * 1e3, 3),
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }
