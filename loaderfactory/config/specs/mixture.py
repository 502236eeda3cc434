"""Spec of the ``mixture`` dataset: several datasets read as one, by weight, fixed or on a schedule."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from loaderfactory.config.specs.base import Count, Seed, Spec, broken_rules
from loaderfactory.config.specs.kinds import DatasetKindSpec
from loaderfactory.config.specs.refs import DatasetRef

Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class MixtureSourceSpec(Spec):
    """One source of a mixture: any dataset config, and its weight."""

    dataset: DatasetRef
    """Any dataset config (shards, a _target_, another mixture), with its own transforms."""
    weight: Weight | None = None
    """Its share, before normalising; null for every source: shares proportional to the sources' sizes."""
    global_batch: Count | None = None
    """per_source batching: samples per global step when a step reads this source (its batches' size ×
    world size); null: the mixture's global_batch."""


class WeightsPointSpec(Spec):
    """A point of a schedule: the weights from ``at`` on (``hold``), or reached at ``at`` (``linear``)."""

    at: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    """Where on the run the point stands, in the mixture's `at` unit (samples, steps or fraction)."""
    weights: dict[str, Weight]
    """Source name → weight; sources left out weigh 0 here."""


class StopAfterSamples(Spec):
    """An epoch of a fixed number of samples; sources start new passes as needed."""

    samples: Count


class StopAfterSteps(Spec):
    """An epoch of a fixed number of global steps (of global_batch samples; per_source: of each
    step's source's global_batch)."""

    steps: Count


Stop = Literal["first_exhausted", "all_exhausted"] | StopAfterSamples | StopAfterSteps


class MixtureDatasetSpec(DatasetKindSpec):
    """Several datasets read as one, each position's source and sample a pure function of
    ``(seed, position, config)``: the same on every rank, resumed exactly at any world size.

    Weights are the sources' ``weight`` or, on a schedule, ``weights``: points along the run.
    """

    kind: Literal["mixture"] = "mixture"
    sources: dict[str, MixtureSourceSpec] = Field(min_length=1)
    """Source name → {dataset, weight, global_batch (per_source: its own samples per global step)}."""
    weights: list[WeightsPointSpec] | None = None
    """A schedule: points {at, weights} in time order; null: the sources' fixed weights."""
    at: Literal["samples", "steps", "fraction"] = "samples"
    """Unit of the schedule's `at`: samples, global steps (× global_batch), or a fraction of run_samples."""
    interpolate: Literal["hold", "linear"] = "hold"
    """Between points: hold each point's weights, or change them linearly."""
    run_samples: Count | None = None
    """Samples in the whole run (over all epochs); needed by at: fraction."""
    stop: Stop = "all_exhausted"
    """When an epoch ends: first_exhausted (a source was read whole), all_exhausted (every source was; those
    that ran out start a new pass), {samples: N} or {steps: N} (global steps). A schedule needs one of the
    last two."""
    batching: Literal["random", "stratified", "per_source"] = "random"
    """random: each position's source at random, shares exact over every `block` positions; stratified: every
    global batch holds the shares (to one sample); per_source: every global batch from one source, shares
    counted in batches (exact over every `block` batches)."""
    global_batch: Count | None = None
    """Samples per global step (batch_size × world size): the unit of stratified, per_source and at: steps."""
    block: Count = 1024
    """Positions (per_source: batches) over which the shares are exact, in a random order."""
    seed: Seed | None = None
    """Seed of the mixing and of the sources' orders; null: the config's seed."""
    shuffle: bool = True
    """Read each source in a new order on each pass; false: in its own order."""
    max_repeats: Count | None = None
    """Most passes an epoch may take over any source; more is refused before anything runs."""
    source_key: str | None = None
    """Add each item's source name under this key (dict items only)."""

    @model_validator(mode="after")
    def _weights_make_sense(self) -> MixtureDatasetSpec:
        """Weights are given for every source or none, not all 0; a schedule names known sources, in
        time order, over epochs of a fixed size; batching and each ``at`` unit have what they need."""
        problems = self._source_weight_problems() + self._schedule_problems() + self._batch_size_problems()
        if problems:
            raise broken_rules(type(self).__name__, problems)
        return self

    def _source_weight_problems(self) -> list[tuple[str, str, Any]]:
        given = {name: source.weight for name, source in self.sources.items() if source.weight is not None}
        if self.weights is not None:
            return [
                (f"sources.{name}.weight", "the schedule (weights) sets the weights: remove this one", w)
                for name, w in given.items()
            ]
        if given and len(given) < len(self.sources):
            missing = sorted(set(self.sources) - set(given))
            return [
                ("sources", f"give every source a weight, or none (sizes decide); missing: {missing}", None)
            ]
        if given and not any(given.values()):
            return [("sources", "every weight is 0: give at least one source a weight above 0", given)]
        return [
            (f"sources.{name}.weight", "0 never reads this source: remove it, or give it a weight above 0", w)
            for name, w in given.items()
            if w == 0
        ]

    def _schedule_problems(self) -> list[tuple[str, str, Any]]:
        if self.weights is None:
            return self._unit_problems()
        problems = self._unit_problems()
        if not self.weights:
            problems.append(("weights", "give at least one point {at, weights}, or null", []))
        if not isinstance(self.stop, StopAfterSamples | StopAfterSteps):
            told = "a schedule needs epochs of a fixed size: stop: {samples: N} or {steps: N}"
            problems.append(("stop", told, self.stop))
        previous = None
        for n, point in enumerate(self.weights):
            unknown = sorted(set(point.weights) - set(self.sources))
            for name in unknown:
                message = f"no source is called {name!r}; the sources are {sorted(self.sources)}"
                problems.append((f"weights.{n}.weights.{name}", message, point.weights[name]))
            if not any(point.weights.values()):
                problems.append(
                    (f"weights.{n}.weights", "every weight is 0: give one above 0", point.weights)
                )
            if previous is not None and point.at < previous:
                message = f"points must be in time order: {point.at} comes after {previous}"
                problems.append((f"weights.{n}.at", message, point.at))
            if self.at == "fraction" and point.at > 1:
                problems.append((f"weights.{n}.at", "a fraction of the run is at most 1", point.at))
            previous = point.at
        return problems

    def _unit_problems(self) -> list[tuple[str, str, Any]]:
        problems: list[tuple[str, str, Any]] = []
        if self.batching != "random" and self.global_batch is None:
            told = f"{self.batching} batching needs the global batch (batch_size × world size)"
            problems.append(("global_batch", told, None))
        if self.weights is not None and self.at == "steps" and self.global_batch is None:
            problems.append(
                ("global_batch", "at: steps needs the samples per step (batch_size × world size)", None)
            )
        if self.weights is not None and self.at == "fraction" and self.run_samples is None:
            problems.append(("run_samples", "at: fraction needs the run's length in samples", None))
        return problems

    def _batch_size_problems(self) -> list[tuple[str, str, Any]]:
        own = {name: s.global_batch for name, s in self.sources.items() if s.global_batch is not None}
        problems: list[tuple[str, str, Any]] = []
        if isinstance(self.stop, StopAfterSteps) and self.global_batch is None:
            problems.append(("global_batch", "stop: {steps: N} needs the samples per step", None))
        if own and self.batching != "per_source":
            return problems + [
                (f"sources.{name}.global_batch", "a batch size per source needs batching: per_source", size)
                for name, size in own.items()
            ]
        if not self.per_source_sizes():
            return problems
        if self.weights is not None:
            told = "a schedule needs one global_batch for every source (an epoch's length would change)"
            problems.append(("weights", told, None))
        if isinstance(self.stop, StopAfterSamples):
            told = "with a global_batch per source, give the epoch's length in global steps: {steps: N}"
            problems.append(("stop", told, self.stop.model_dump()))
        return problems

    def per_source_sizes(self) -> dict[str, int]:
        """Sources whose global steps differ in size from ``global_batch``: name → their size."""
        return {
            name: s.global_batch
            for name, s in self.sources.items()
            if s.global_batch is not None and s.global_batch != self.global_batch
        }

    mix_fields: ClassVar[frozenset[str]] = frozenset({"weights", "at", "interpolate", "run_samples"})
    """Fields that only change how the sources are mixed (with each source's ``weight``, and the
    sources themselves: one added or removed)."""

    def is_mix_change(self, path: tuple[str, ...]) -> bool:
        """A source's weight, a source added or removed, or the schedule."""
        if path[:1] == ("sources",):
            return len(path) == 2 or (len(path) == 3 and path[2] == "weight")
        return bool(path) and path[0] in self.mix_fields

    def is_location(self, path: tuple[str, ...], saved: str, now: str) -> bool:
        """Also a location inside a source's dataset (``sources.<name>.dataset.<field>``)."""
        if len(path) > 3 and path[0] == "sources" and path[2] == "dataset" and path[1] in self.sources:
            inner = self.sources[path[1]].dataset
            return isinstance(inner, Spec) and inner.is_location(path[3:], saved, now)
        return super().is_location(path, saved, now)

    def mixing_block(self) -> int:
        """Units whose shares are exact: the global batch when stratified, else ``block``."""
        return self.global_batch if self.batching == "stratified" and self.global_batch else self.block

    def mixing_unit(self) -> int:
        """Positions taken from one source at a time: the global batch for per_source, else 1."""
        return self.global_batch if self.batching == "per_source" and self.global_batch else 1

    def timeline_at(self, at: float) -> int:
        """A schedule point's ``at`` as a position on the timeline (samples over all epochs)."""
        if self.at == "steps":
            return round(at * (self.global_batch or 1))
        if self.at == "fraction":
            return round(at * (self.run_samples or 0))
        return round(at)

    def known_length(self) -> int | None:
        if isinstance(self.stop, StopAfterSteps) and not self.per_source_sizes():
            return self.stop.steps * (self.global_batch or 1)
        return self.stop.samples if isinstance(self.stop, StopAfterSamples) else None
