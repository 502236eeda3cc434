"""Spec → component functions, one module per slot; registered in :mod:`loaderfactory.config.builtins`.

A slot builder is called as ``builder(spec, upstream, context)``: ``upstream`` is what the slot
before produced (``None`` for the dataset slot). A helper builder (transform, collate) is called as
``builder(spec)``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loaderfactory.config.specs.base import Spec


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


def spec_arguments(spec: Spec, besides: Collection[str] = ()) -> dict[str, Any]:
    """The spec's fields as keyword arguments of its component, whose arguments have the fields' names
    and take their values as validated: every field but ``kind`` and ``besides`` (those the builder
    turns into something else first: a sub-spec into a collate function, a seed into this rank's)."""
    skip = {"kind", *besides}
    return {name: getattr(spec, name) for name in type(spec).model_fields if name not in skip}
