"""Readings of a running loader taken at intervals: how full its queue is, how many shards it has
opened so far. The report's figure draws them over time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Gauge = Callable[[], Mapping[str, float] | None]
"""Returns named readings now, or ``None`` when there is nothing to read (a queue not started)."""

MAX_READINGS = 2048
"""Readings kept per gauge; past this, every second one is dropped and the interval doubles."""


@dataclass
class Readings:
    """One gauge's readings: ``times`` (``perf_counter``) and, per name, the values at those times."""

    times: list[float] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, now: float, reading: Mapping[str, float]) -> None:
        if self.values and set(reading) != set(self.values):
            raise ValueError(
                f"a gauge's readings changed names: {sorted(self.values)} then {sorted(reading)}"
            )
        self.times.append(now)
        for name, value in reading.items():
            self.values.setdefault(name, []).append(float(value))

    def thin(self) -> None:
        """Drop every second reading (the first and the last stay)."""
        last = len(self.times) - 1
        keep = [i for i in range(len(self.times)) if i % 2 == 0 or i == last]
        self.times = [self.times[i] for i in keep]
        self.values = {name: [values[i] for i in keep] for name, values in self.values.items()}


class GaugeSampler:
    """Reads each gauge every ``interval`` seconds on a thread, from ``with`` until its end.

    Costs one thread and a few reads a second; long runs keep at most :data:`MAX_READINGS` readings
    per gauge, spread over the whole run. A gauge that raises stops the sampling and the error is
    raised again when the ``with`` block ends.

    Args:
        gauges: name → a function returning the readings now (see :data:`Gauge`).
        interval: seconds between readings at first.
    """

    def __init__(self, gauges: Mapping[str, Gauge], interval: float = 0.02) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        self.gauges = dict(gauges)
        self.interval = interval
        self.readings: dict[str, Readings] = {name: Readings() for name in self.gauges}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> GaugeSampler:
        self._read()
        if self.gauges:
            self._thread = threading.Thread(target=self._run, name="loaderfactory-gauges", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(quietly=kind is not None)  # the block's own error goes on, not a gauge's

    def close(self, quietly: bool = False) -> None:
        """Stop sampling and take a last reading (not ``quietly``: then a gauge's error is raised
        here instead); safe to call twice."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join()
        error, self._error = self._error, None
        if quietly:
            return
        if error is not None:
            raise error
        self._read()

    def _run(self) -> None:
        pause = self.interval
        while not self._stop.wait(pause):
            try:
                self._read()
            except BaseException as err:  # noqa: BLE001 - forwarded, raised again by close()
                self._error = err
                return
            if any(len(readings.times) >= MAX_READINGS for readings in self.readings.values()):
                for readings in self.readings.values():
                    readings.thin()
                pause *= 2

    def _read(self) -> None:
        for name, gauge in self.gauges.items():
            reading = gauge()
            if reading is not None:
                self.readings[name].add(time.perf_counter(), reading)
