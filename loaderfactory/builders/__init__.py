"""Spec → component functions, one module per slot; registered in :mod:`loaderfactory.config.builtins`.

A slot builder is called as ``builder(spec, upstream, context)``: ``upstream`` is what the slot
before produced (``None`` for the dataset slot). A helper builder (transform, collate) is called as
``builder(spec)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class BuildContext:
    """What a builder may need besides its own spec and its upstream.

    Attributes:
        seed: the root config's ``seed`` (components with no seed of their own use it).
        dataset: the dataset at the head of the pipeline.
        batched: whether ``upstream`` already yields batches (a queue draws its own).
        progress: the config's ``run.progress``: whether long work while building (indexing shards)
            shows a progress bar.
    """

    seed: int | None = None
    dataset: Any = None
    batched: bool = False
    progress: bool = True
