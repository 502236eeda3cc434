"""``Loader``: the pipeline ``build_loader`` returns, with one interface whatever its slots."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from loaderfactory.components.batch_utils import batch_length
from loaderfactory.components.lifecycle import close_component
from loaderfactory.stats import LoaderStats


class Loader:
    """Batches from a chain of components: ``dataset`` → ``queue`` → ``loader`` → ``stream`` → ``prefetch``.

    Iterate it like a ``DataLoader``; ``len()`` is the number of batches one epoch really yields.
    It owns the threads and processes of its components: ``close()`` (or leaving a ``with``)
    releases them. ``stats`` holds what the consumer measured: batches, items, and how long it
    waited for each batch.

    Args:
        components: slot name → component, in pipeline order; the last one yields the batches.
        spec: the validated spec it was built from, if any.
    """

    def __init__(self, components: Mapping[str, Any], spec: Any = None) -> None:
        if not components:
            raise ValueError("a Loader needs at least one component")
        self._components = dict(components)
        self.spec = spec
        self.stats = LoaderStats()
        self.epoch = 0
        self._closed = False

    @property
    def components(self) -> Mapping[str, Any]:
        """Slot name → component, in pipeline order (empty slots are absent)."""
        return MappingProxyType(self._components)

    @property
    def dataset(self) -> Any:
        return self._components.get("dataset")

    @property
    def output(self) -> Any:
        """The last component: the one whose batches the loader yields."""
        return next(reversed(self._components.values()))

    def __getitem__(self, slot: str) -> Any:
        try:
            return self._components[slot]
        except KeyError:
            raise KeyError(
                f"no component in slot {slot!r}; this loader has {', '.join(self._components)}"
            ) from None

    def __len__(self) -> int:
        return len(self.output)

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            raise RuntimeError("this Loader is closed; build a new one")
        return self._epoch()

    def _epoch(self) -> Iterator[Any]:
        stats = self.stats
        stats.start()
        iterator = iter(self.output)
        clock = time.perf_counter
        try:
            while True:
                before = clock()
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                stats.record(clock() - before, batch_length(batch))
                yield batch
            self.epoch += 1
        finally:
            close = getattr(iterator, "close", None)
            if callable(close):
                close()
            del iterator

    def telemetry(self) -> dict[str, Any]:
        """The stats summary plus what each component reports through its own ``telemetry()``."""
        report = self.stats.summary()
        parts = {}
        for slot, component in self._components.items():
            telemetry = getattr(component, "telemetry", None)
            if callable(telemetry):
                parts[slot] = telemetry()
        if parts:
            report["components"] = parts
        return report

    def close(self) -> None:
        """Stop every thread and process the components own, last stage first; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for component in reversed(list(self._components.values())):
            close_component(component)

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        chain = " → ".join(f"{slot}={type(c).__name__}" for slot, c in self._components.items())
        return f"Loader({chain})"
