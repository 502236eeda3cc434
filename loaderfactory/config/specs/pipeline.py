"""The root spec: one field per pipeline slot, plus what the command-line run does."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from loaderfactory.config.specs.base import Count, Milliseconds, Seed, Spec, broken_rules
from loaderfactory.config.specs.loader import TorchLoaderSpec
from loaderfactory.config.specs.refs import DatasetRef, LoaderRef, PrefetchRef, QueueRef, StreamRef
from loaderfactory.config.specs.resume import ResumeSpec

HYDRA_KEYS = ("_target_", "_recursive_", "_convert_", "_partial_")
"""Keys Hydra's ``instantiate`` reads on the root node; they are not part of the spec."""


class RunSpec(Spec):
    """What the ``loaderfactory`` command does with the loader it built."""

    mode: Literal["run", "validate", "plan", "schema"] = "run"
    """`run` draws and reports; `validate` checks; `plan` prints what would run and hold; `schema`."""
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
    """Save PNG plots (consumer-wait histogram, and what components draw) beside the report."""

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

    @model_validator(mode="after")
    def _loader_fits_the_queue(self) -> LoaderSpec:
        """After a queue the loader passes its batches on: no batching, shuffling or workers of its own."""
        if self.queue is None:
            return self
        problems = self.loader.refuse_after_batches(getattr(self.queue, "batch_size", None))
        if problems:
            raise broken_rules(type(self).__name__, [(f"loader.{f}", m, v) for f, m, v in problems])
        return self

    def slot(self, name: str) -> Any:
        """The spec in slot ``name`` (``None`` for an empty optional slot)."""
        return getattr(self, name)
