"""The root spec: one field per pipeline slot, plus what the command-line run does."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from loaderfactory.config.specs.base import Count, Milliseconds, Seed, Spec, broken_rules
from loaderfactory.config.specs.kinds import (
    BatchingKindSpec,
    CollateKindSpec,
    DatasetKindSpec,
    LoaderKindSpec,
    StageKindSpec,
)
from loaderfactory.config.specs.loader import TorchLoaderSpec
from loaderfactory.config.specs.pack import PackSpec
from loaderfactory.config.specs.refs import DatasetRef, LoaderRef, PrefetchRef, QueueRef, StreamRef
from loaderfactory.config.specs.resume import ResumeSpec
from loaderfactory.rules import missing_keys_problems, ring

HYDRA_KEYS = ("_target_", "_recursive_", "_convert_", "_partial_")
"""Keys Hydra's ``instantiate`` reads on the root node; they are not part of the spec."""


class RunSpec(Spec):
    """What the ``loaderfactory`` command does with the loader it built."""

    mode: Literal["run", "validate", "plan", "schema", "index", "pack"] = "run"
    """`run` draws and reports; `validate` checks; `plan` prints what would run and hold; `schema`;
    `index` writes the index of `dataset: shards`; `pack` writes the dataset as shards (see `pack`)."""
    batches: Count | None = None
    """Batches to draw, across epochs; null runs `epochs` full epochs."""
    epochs: Count = 1
    """Full epochs to run when ``batches`` is null."""
    step_ms: Milliseconds = 0.0
    """A simulated training step: the consumer sleeps this long per batch."""
    progress: bool = True
    """Show a tqdm progress bar on stderr."""
    report: str = "report.json"
    """File name of the JSON report, in Hydra's output directory."""
    plots: bool = True
    """Save the run's figure beside the report, named like it (`report.png`): the wait per batch
    over time, per-stage times, the queue's fill and the shards opened (see docs/report.md)."""

    @field_validator("report")
    @classmethod
    def _plain_file_name(cls, name: str) -> str:
        """A file name without folders: the report is written in Hydra's output directory."""
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise ValueError(f"must be a file name (it is written in Hydra's output directory), got {name!r}")
        return name


class LoaderSpec(Spec):
    """A whole loader: ``dataset`` → ``queue`` → ``loader`` → ``stream`` → ``prefetch``.

    ``queue``, ``stream`` and ``prefetch`` are optional; ``dataset`` may instead be passed to
    :func:`~loaderfactory.build_loader` as an object. ``seed`` seeds every component that takes a
    seed and has none of its own.
    """

    dataset: DatasetRef | None = None
    queue: QueueRef | None = None
    loader: LoaderRef = Field(default_factory=lambda: TorchLoaderSpec())
    stream: StreamRef | None = None
    prefetch: PrefetchRef | None = None
    seed: Seed | None = None
    """Seeds every component that takes a seed and has none of its own."""
    resume: ResumeSpec = Field(default_factory=ResumeSpec)
    """How strictly a saved state's config must match (the data's location may differ by default)."""
    run: RunSpec = Field(default_factory=RunSpec)
    pack: PackSpec = Field(default_factory=PackSpec)
    """Where and how `run.mode=pack` writes the dataset as shards."""

    @model_validator(mode="after")
    def _slots_fit_together(self) -> LoaderSpec:
        """Rules across slots, all reported at once: after a queue the loader passes its batches on;
        a ring collate holds every batch alive at once; an epoch gives every rank a batch; the collate
        asks for keys the items have."""
        problems = (
            self._queue_problems()
            + self._ring_problems()
            + self._epoch_problems()
            + self._key_problems()
            + self._pack_problems()
        )
        if problems:
            raise broken_rules(type(self).__name__, problems)
        return self

    def _queue_problems(self) -> list[tuple[str, str, Any]]:
        """After a queue the loader passes its batches on: no batching, shuffling or workers of its own."""
        if self.queue is None:
            return []
        if not isinstance(self.loader, LoaderKindSpec):
            return []
        problems = self.loader.refuse_after_batches(getattr(self.queue, "batch_size", None))
        return [(f"loader.{f}", m, v) for f, m, v in problems]

    def _held_after_loader(self) -> tuple[int, list[str]]:
        """Batches the stages after the loader hold besides your loop's, and where (naming fields)."""
        held, where = 0, []
        for slot in ("stream", "prefetch"):
            spec = self.slot(slot)
            count, why = spec.read_ahead() if isinstance(spec, StageKindSpec) else (0, "")
            if count:
                held += count
                where.append(f"{slot}.{why}")
        return held, where

    def _ring_problems(self) -> list[tuple[str, str, Any]]:
        """A collate that reuses buffers must outlast every batch it made that is alive at once."""
        held, where = self._held_after_loader()
        problems: list[tuple[str, str, Any]] = []
        for slot in ("queue", "loader"):
            spec = self.slot(slot)
            collate = getattr(spec, "collate", None)
            ring_size = collate.reused_batches() if isinstance(collate, CollateKindSpec) else None
            alive = (
                spec.collated_alive(held)
                if ring_size is not None and isinstance(spec, BatchingKindSpec)
                else None
            )
            if ring_size is None or alive is None:
                continue
            reasons = [alive[1], *where, "1 in your loop"]
            problems += ring.ring_problems(f"{slot}.collate.ring_size", ring_size, alive[0], reasons)
        return problems

    def _key_problems(self) -> list[tuple[str, str, Any]]:
        """The loader's collate asks only for keys the dataset's items have, where the spec says
        which (a queue's transforms may add keys, so only without one)."""
        keys = self.dataset.known_keys() if isinstance(self.dataset, DatasetKindSpec) else None
        collate = getattr(self.loader, "collate", None)
        if keys is None or self.queue is not None or not isinstance(collate, CollateKindSpec):
            return []
        return missing_keys_problems(
            "loader.collate.keys", collate.wanted_keys(), keys, "dataset.fields (with dataset.index)"
        )

    def _epoch_problems(self) -> list[tuple[str, str, Any]]:
        """An epoch of the dataset's known length gives every rank at least one batch (a queue draws
        ``epoch_size`` batches whatever the length)."""
        length = self.dataset.known_length() if isinstance(self.dataset, DatasetKindSpec) else None
        if length is None or self.queue is not None or not isinstance(self.loader, LoaderKindSpec):
            return []
        problems: list[tuple[str, str, Any]] = self.loader.empty_epoch_problems(length, "dataset.length")
        return problems

    def _pack_problems(self) -> list[tuple[str, str, Any]]:
        """Packing needs a place to write to."""
        if self.run.mode == "pack" and self.pack.out is None:
            return [
                ("pack.out", "run.mode=pack needs pack.out: a folder or URL to write the shards to", None)
            ]
        return []

    def slot(self, name: str) -> Any:
        """The spec in slot ``name`` (``None`` for an empty optional slot)."""
        return getattr(self, name)
