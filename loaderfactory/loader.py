"""``Loader``: the pipeline ``build_loader`` returns, with one interface whatever its slots."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from loaderfactory.components.data.batch_utils import batch_length
from loaderfactory.components.data.sources import is_map_style
from loaderfactory.components.state import ReadsAhead, Snapshots, require_int, require_keys
from loaderfactory.components.workers.lifecycle import close_component, stopping_together
from loaderfactory.components.workers.uninterruptible import runs_to_its_end
from loaderfactory.errors import ConfigError, ConfigProblem, LimitError, ResumeError
from loaderfactory.loader_state import (
    Chain,
    Difference,
    global_batch_splits,
    load_slot,
    mixture_changes,
    moved_data,
    saveable,
    saved_slots,
    slot_snapshots,
    split_slots,
    stateful,
    warn_mixture_changed,
    warn_moved,
)
from loaderfactory.stats import LoaderStats

STATE_FORMAT = "loaderfactory.state/2"
OLD_FORMATS = {
    "loaderfactory.state/1": "its positions count one rank's batches, which mean nothing on another rank "
    "or at another world size",
}
"""Formats this version refuses, with why."""


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
        self.batches_in_epoch = 0
        self._resumed = False
        self._closed = False
        # Each stage that reads ahead tracks the slots before it (see state_dict), unless one of
        # them cannot be saved: then state_dict() says so and nothing is taken per item.
        slots: list[tuple[str, Snapshots, bool]] = []
        self._upstreams: dict[str, Chain] = {}
        for slot, component in self._components.items():
            tracks = bool(slots) and isinstance(component, ReadsAhead)
            tracks = tracks and all(saveable(snaps) for _, snaps, _ in slots)
            if tracks:
                self._upstreams[slot] = Chain(slots)
                component.track_upstream(self._upstreams[slot])
            slots.append((slot, slot_snapshots(slot, component), tracks))
        self._chain = Chain(slots)

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
        """Batches of a whole epoch, counted from its start, whatever part of it was already delivered.

        A loader restored mid-epoch reports the whole epoch and its next pass yields the rest, as
        torch's stateful loaders do: PyTorch Lightning adds the batches it already took to this
        count. It is the last component's ``len()``: components count a whole epoch the same way.
        """
        return len(self.output)

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            raise RuntimeError("this Loader is closed; build a new one")
        if not self._resumed:
            self.batches_in_epoch = 0
        self._resumed = False
        return self._epoch()

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (the ``DistributedSampler`` convention).

        Components that shuffle per epoch (``torch``, ``sharded``) follow it, so every rank that
        sets the same epoch loads its part of the same order. Optional: each full pass advances the
        epoch by itself. After :meth:`load_state_dict`, setting the saved epoch keeps the position.
        """
        for component in self._components.values():
            set_epoch = getattr(component, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)
        if not (self._resumed and epoch == self.epoch):
            self.epoch, self.batches_in_epoch, self._resumed = epoch, 0, False

    def _epoch(self) -> Iterator[Any]:
        stats = self.stats
        stats.start()
        iterator = iter(self.output)
        clock = time.perf_counter
        failed = False
        try:
            while True:
                before = clock()
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                except LimitError as err:
                    # A limit only the data can break (an item bigger than the queue's RAM budget).
                    raise self._located(err) from err
                after = clock()
                stats.record(after - before, batch_length(batch), after)
                self.batches_in_epoch += 1
                yield batch
            self.epoch += 1
            self.batches_in_epoch = 0
        except GeneratorExit:
            raise
        except BaseException:
            failed = True
            raise
        finally:
            close = getattr(iterator, "close", None)
            if callable(close):
                # After an error (Ctrl-C too) nothing is waited for: the error reaches the loop first.
                with stopping_together(wait=not failed):
                    close()
            del iterator

    def _located(self, err: LimitError) -> ConfigError:
        """``err`` as a config problem at the field of the slot whose component raised it."""
        slot = next((s for s, c in self._components.items() if c is err.component), None)
        return ConfigError(ConfigProblem(f"{slot}.{err.argument}" if slot else err.argument, err.message))

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

    def state_dict(self) -> dict[str, Any]:
        """Where the consumer stands, per slot: JSON data that :meth:`load_state_dict` resumes from.

        Taken after batch k (inside the loop or after it), a freshly built ``Loader`` of the same
        config that loads it yields exactly batches k+1, k+2, ... of an uninterrupted run, epoch
        boundaries included, for seeded sources. Every component must implement
        ``state_dict()``/``load_state_dict()`` (see :mod:`loaderfactory.components.state`);
        map-style datasets (lists and arrays too) hold no position and are recorded by their length.

        Raises:
            ResumeError: naming the first slot that cannot be saved (a generator-backed
                ``IterableDataset``, say); iterating such a loader works, saving it does not.
        """
        chain = self._chain
        slots = split_slots(chain.state_from_snapshot(chain.state_snapshot()), self._upstreams)
        return copy.deepcopy(
            {
                "format": STATE_FORMAT,
                "epoch": self.epoch,
                "batches_in_epoch": self.batches_in_epoch,
                "config": self._config(),
                "slots": {
                    slot: {"kind": self._kind(slot), "state": slots[slot]} for slot in self._components
                },
            }
        )

    def load_state_dict(self, state: Mapping[str, Any], strict: bool | None = None) -> None:
        """Resume from :meth:`state_dict` of a loader built from the same config; call before iterating.

        The data may have moved: where the configs differ only in where the data lives (a kind's
        ``location_fields`` such as tensor_folder's ``root``, a ``_target_``'s path-like arguments,
        the config's ``resume.locations``), the state loads with a ``ResumeWarning`` naming each,
        saved and now, provided the dataset's kind and length match. ``strict`` (default: the
        config's ``resume.strict``, else ``False``) refuses those differences too.

        The whole state is checked before any slot is loaded, and each component checks its own
        part before it changes anything; a component that refuses its part leaves the slots before
        it loaded, so load a good state or build the loader again.

        Raises:
            ResumeError: the state comes from another config, slot layout or component settings
                (worker count, world size, ...), or is not a loader state. A field that is missing,
                ``None``, of the wrong type or out of range is named by its path in the state
                (``slots.loader.state.position``).
        """
        saved_format = state.get("format") if isinstance(state, Mapping) else None
        if saved_format in OLD_FORMATS:
            raise ResumeError(
                f"the state is a {saved_format} state, saved by an older loaderfactory: "
                f"{OLD_FORMATS[saved_format]}; this version reads {STATE_FORMAT}. Start the run afresh "
                "(or resume it with the loaderfactory version that saved it)"
            )
        if saved_format != STATE_FORMAT:
            raise ResumeError(
                f"not a Loader state (expected format {STATE_FORMAT!r}); "
                "pass what Loader.state_dict() returned"
            )
        owner = "Loader"
        require_keys(owner, state, ("epoch", "batches_in_epoch", "slots"))
        epoch = require_int(owner, state, "epoch")
        batches_in_epoch = require_int(owner, state, "batches_in_epoch")
        if strict is None:
            strict = bool(getattr(getattr(self.spec, "resume", None), "strict", False))
        config = self._config()
        remixed = mixture_changes(state.get("config"), config, self.spec)
        split = global_batch_splits(state.get("config"), config, self._components.get("dataset"))
        moved = moved_data(state.get("config"), config, self.spec, strict, accepted=remixed + split)
        saved = saved_slots(state["slots"])
        if list(saved) != list(self._components):
            raise ResumeError(
                f"the state has slots {', '.join(saved)} but this loader has {', '.join(self._components)}"
            )
        for slot, component in self._components.items():
            kind, saved_kind = self._kind(slot), saved[slot]["kind"]
            if None not in (kind, saved_kind) and saved_kind != kind:
                raise ResumeError(f"{slot}: the state is of kind {saved_kind!r}, this slot is {kind!r}")
            stateful(slot, component)
        self._load_slots(saved, moved)
        self.epoch = epoch
        self.batches_in_epoch = batches_in_epoch
        self._resumed = True
        warn_moved(moved)
        warn_mixture_changed(remixed)

    def _load_slots(self, saved: Mapping[str, Mapping[str, Any]], moved: list[Difference]) -> None:
        """Each slot's part of a checked state; a dataset recorded by its length must have it still."""
        for slot, component in self._components.items():
            own = saved[slot]["state"]
            if is_map_style(component) and not hasattr(component, "load_state_dict"):
                if own.get("length") != len(component):
                    elsewhere = f" (read from another place: {'; '.join(map(str, moved))})" if moved else ""
                    raise ResumeError(
                        f"{slot}: the state was saved for {own.get('length')} items, "
                        f"this dataset has {len(component)}{elsewhere}; resume with the same data"
                    )
                continue
            load_slot(slot, component, own)

    def _kind(self, slot: str) -> str | None:
        """The slot's kind in the spec (``None`` without a spec, or for a dataset object of yours)."""
        kind = getattr(getattr(self.spec, slot, None), "kind", None)
        return kind if isinstance(kind, str) else None

    def _config(self) -> Any:
        """The config as far as it decides the batch sequence (each slot's ``speed_only`` and
        ``rank_only`` fields, ``run``, ``resume`` and ``pack`` left out)."""
        if self.spec is None or not hasattr(self.spec, "model_dump"):
            return None
        exclude: dict[str, Any] = {"run": True, "resume": True, "pack": True}
        for name in type(self.spec).model_fields:
            slot = getattr(self.spec, name)
            free = set(getattr(slot, "speed_only", ())) | set(getattr(slot, "rank_only", ()))
            if free:
                exclude[name] = free
        return self.spec.model_dump(mode="json", exclude=exclude)

    @runs_to_its_end
    def close(self) -> None:
        """Stop every thread and process the components own, last stage first; safe to call twice.

        Bounded: all stages share one grace (see :mod:`loaderfactory.components.workers.lifecycle`).
        A stage whose close raises (Ctrl-C landing in it included) does not keep the stages before
        it open: they are closed, then the first error is raised. The command holds Ctrl-C until
        close returns (:mod:`~loaderfactory.components.workers.uninterruptible`).
        """
        if self._closed:
            return
        self._closed = True
        first_error: BaseException | None = None
        # One grace for every stage: a prefetch thread waiting on the loader's workers is released
        # when they stop, instead of being waited for first (see workers.lifecycle).
        with stopping_together():
            for component in reversed(list(self._components.values())):
                try:
                    close_component(component)
                except BaseException as error:  # noqa: BLE001  # raised once the rest are closed
                    first_error = first_error or error
        if first_error is not None:
            raise first_error

    def __enter__(self) -> Loader:
        return self

    @runs_to_its_end
    def __exit__(self, *exc: object) -> None:
        # With an exception on its way out, nothing is waited for: the error comes first.
        with stopping_together(wait=exc[0] is None):
            self.close()

    def __repr__(self) -> str:
        chain = " → ".join(f"{slot}={type(c).__name__}" for slot, c in self._components.items())
        return f"Loader({chain})"
