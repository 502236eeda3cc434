"""What a loader measured while it ran: throughput, consumer wait, memory."""

from __future__ import annotations

import importlib
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
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


class PeakMemory:
    """Peak memory of this process and its workers while a ``with`` block runs, in MiB.

    ``peak_mb`` is the peak of the process tree's total PSS (proportional set size): a page that
    forked workers share with this process counts once, split between them, rather than once per
    process as summing RSS would (4 forked workers of a 300 MiB process are not 1.5 GiB). Where PSS
    cannot be read (not Linux, or ``/proc`` hidden), it is the RSS sum; :attr:`measure` says which.
    A thread samples it, pausing at least ``interval`` seconds and twice as long as the last sample
    took (reading PSS walks the page tables), so sampling costs at most a third of a core.

    ``own_peak_rss_mb`` is this process alone: its RSS peak, on Linux the kernel's own (``VmHWM``,
    reset on entry through ``/proc/self/clear_refs``), so a short spike between samples counts.
    Unlike :func:`peak_rss_mb`, earlier work in the process (another job of a sweep) does not count.
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.peak_mb = 0.0
        self.baseline_mb = 0.0
        self.own_peak_rss_mb = 0.0
        self.measure = "pss" if _pss_of(psutil.Process()) is not None else "rss"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._kernel_peak = False

    def __enter__(self) -> PeakMemory:
        self._kernel_peak = _reset_kernel_peak()
        self._stop.clear()
        self._sample()
        self.baseline_mb = self.peak_mb
        self._thread = threading.Thread(target=self._run, name="loaderfactory-peak-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sample()
        if self._kernel_peak:
            self.own_peak_rss_mb = max(self.own_peak_rss_mb, _kernel_peak_mb())

    @property
    def growth_mb(self) -> float:
        """How far the peak rose above the memory held when the block began."""
        return max(0.0, self.peak_mb - self.baseline_mb)

    def _run(self) -> None:
        pause = self.interval
        while not self._stop.wait(pause):
            began = time.perf_counter()
            self._sample()
            pause = max(self.interval, 2 * (time.perf_counter() - began))

    def _sample(self) -> None:
        process = psutil.Process()
        own_rss = process.memory_info().rss
        self.own_peak_rss_mb = max(self.own_peak_rss_mb, own_rss / 2**20)
        total = 0
        for member in [process, *process.children(recursive=True)]:
            try:
                pss = _pss_of(member) if self.measure == "pss" else None
                total += pss if pss is not None else member.memory_info().rss
            except psutil.Error:  # a worker that just exited
                continue
        self.peak_mb = max(self.peak_mb, total / 2**20)


def _pss_of(process: psutil.Process) -> int | None:
    """``process``'s PSS in bytes, or ``None`` where the platform does not give it."""
    try:
        return int(process.memory_full_info().pss)
    except (AttributeError, psutil.AccessDenied):  # no ``pss`` field off Linux; /proc hidden
        return None


def _reset_kernel_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _kernel_peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**10
    return 0.0


@dataclass
class LoaderStats:
    """Per-batch consumer wait and counts, filled in by :class:`~loaderfactory.loader.Loader`.

    Keeps two floats a batch (``waits``, ``arrivals``): the report plots each batch's wait over time.
    """

    batches: int = 0
    items: int = 0
    waits: list[float] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    """When each batch reached the consumer (``perf_counter``)."""
    epoch_starts: list[int] = field(default_factory=list)
    """The batch count at the start of each pass."""
    started: float | None = None
    finished: float | None = None

    def start(self) -> None:
        """A pass begins: the first one starts the clock."""
        if self.started is None:
            self.started = time.perf_counter()
        self.epoch_starts.append(self.batches)

    def record(self, wait: float, items: int, now: float | None = None) -> None:
        """One batch of ``items`` the consumer waited ``wait`` s for, got at ``now`` (``perf_counter``)."""
        self.batches += 1
        self.items += items
        self.waits.append(wait)
        self.finished = time.perf_counter() if now is None else now
        self.arrivals.append(self.finished)

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
