"""Bases of each slot's kinds: the hooks the pipeline asks a kind of that slot, with their defaults.

A kind's spec subclasses the base of its slot, and its author sees there the hooks that apply:

- :class:`DatasetKindSpec` (``dataset``): what the spec already knows of the items (length, keys);
- :class:`BatchingKindSpec` (``queue``) and :class:`LoaderKindSpec` (``loader``): kinds that collate
  batches, and the loader's checks of an epoch and of the slot before it;
- :class:`StageKindSpec` (``stream``, ``prefetch``): batches the stage holds besides its consumer's;
- :class:`CollateKindSpec` (``collate``): buffers it reuses, keys it needs.

What every spec declares (``speed_only``, ``rank_only``, ``location_fields``, ``value_aliases``) stays
on :class:`~loaderfactory.config.specs.base.Spec`. A kind whose spec subclasses plain ``Spec`` (a
user's, say) gets each hook's default: the pipeline asks ``isinstance(spec, <base>)`` first.
"""

from __future__ import annotations

from typing import Any

from loaderfactory.config.specs.base import Spec


class DatasetKindSpec(Spec):
    """Base of ``dataset`` kinds."""

    def known_keys(self) -> list[str] | None:
        """The keys of every item when the spec says (``None``: not known)."""
        return None

    def known_length(self) -> int | None:
        """Items per epoch when the spec says (``None``: known once built)."""
        return None


class BatchingKindSpec(Spec):
    """Base of kinds that collate batches: ``queue`` kinds, and ``loader`` kinds (:class:`LoaderKindSpec`)."""

    def collated_alive(self, held_after: int) -> tuple[int, str] | None:
        """How many batches this kind's ``collate`` made may be alive at once when the stages after it
        hold ``held_after``, and why, naming the fields (:mod:`loaderfactory.rules.ring`); ``None``:
        not known, nothing is checked."""
        return None


class LoaderKindSpec(BatchingKindSpec):
    """Base of ``loader`` kinds."""

    def empty_epoch_problems(
        self, length: int, length_source: str, world_size: int | None = None
    ) -> list[tuple[str, str, Any]]:
        """``(path, message, value)`` when an epoch of ``length`` items gives some
        rank no batch; ``world_size`` ``None``: what ``distributed`` says (1 unless explicit)."""
        return []

    def refuse_after_batches(self, batch_size: int | None) -> list[tuple[str, str, Any]]:
        """``(field, message, value)`` for each setting that makes no sense
        when the slot before (a queue) already yields whole batches of ``batch_size`` items.

        A kind that cannot follow a batching slot at all reports its ``kind``. The default refuses
        nothing.
        """
        return []


class StageKindSpec(Spec):
    """Base of ``stream`` and ``prefetch`` kinds: stages after the loader."""

    def read_ahead(self) -> tuple[int, str]:
        """Batches this stage holds besides its consumer's, and
        where, naming its fields (``"buffer_size=4: 4 queued + 1 ..."``). The default holds none."""
        return 0, ""


class CollateKindSpec(Spec):
    """Base of ``collate`` kinds."""

    def reused_batches(self) -> int | None:
        """For a collate that reuses buffers: batches that stay valid together; ``None``: all."""
        return None

    def wanted_keys(self) -> list[str]:
        """The item keys it needs (a key filter, a tuple's keys)."""
        return []
