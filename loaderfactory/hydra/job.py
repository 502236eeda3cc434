"""One run of the command (``run.mode=run``): build, draw the batches, measure, report; Ctrl-C included.
Also ``run.mode=pack``: build the dataset alone and write it as shards."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loaderfactory.components.workers.uninterruptible import runs_to_its_end
from loaderfactory.config.specs.pipeline import LoaderSpec
from loaderfactory.errors import BuildInterrupted, ConfigError, ConfigProblem
from loaderfactory.hydra.exits import Interrupted

if TYPE_CHECKING:
    from loaderfactory.loader import Loader


def run_job(spec: LoaderSpec, out_dir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Build the loader, draw the run's batches, write ``run.report`` in ``out_dir``; return it.

    Raises:
        ConfigError: the run drew no batch (an empty epoch), naming the fields that made it empty.
        Interrupted: Ctrl-C, at any stage; the report of what was done is written, marked
            ``"interrupted": true``, with the ``"stage"`` it stopped in (``building``, ``drawing
            batches``, ``closing``, ``reporting``) and the slots ``"built"`` by then.
    """
    from loaderfactory.report import format_report, write_report

    run = _Run()
    try:
        run.stage = "building"  # importing torch first: seconds on a busy machine
        from loaderfactory.factory import build_loader
        from loaderfactory.gauges import GaugeSampler
        from loaderfactory.hydra.figure import run_gauges, run_record, write_figure
        from loaderfactory.stats import PeakMemory

        with PeakMemory() as memory:
            run.memory = memory
            loader = run.loader = build_loader(spec)
            run.built = list(loader.components)
            with loader:
                run.stage = "drawing batches"
                try:
                    with GaugeSampler(run_gauges(loader) if spec.run.plots else {}) as gauges:
                        run.summary = consume(loader, spec)
                except KeyboardInterrupt:  # the workers stop as the `with` ends, then we report
                    run.stopped, run.summary = run.stage, loader.telemetry()
                run.stage = "closing"
        run.stage = "reporting"
        if run.stopped is None and run.summary["batches"] == 0:
            raise ConfigError(no_batch_problem(spec, loader))
        summary = run.report(spec)
        if run.stopped is None and spec.run.plots:
            record = run_record(loader, summary, gauges.readings)
            summary["plots"] = [str(write_figure(record, out_dir / spec.run.report))]
    except BuildInterrupted as stop:
        run.stopped, run.built, run.building = "building", stop.built, stop.building
    except KeyboardInterrupt:
        run.stopped = run.stage
    if run.stopped is not None:
        summary = run.report(spec)  # again: the memory figures and shards' stats of a run cut short
    try:
        report = write_report(summary, out_dir / spec.run.report)
        say(f"{format_report(summary)}\n{'partial report' if run.stopped else 'report'}: {report}")
    except KeyboardInterrupt:  # the first Ctrl-C, as the report of a whole run was written
        run.stopped = "reporting"
        summary = run.report(spec)
        report = write_report(summary, out_dir / spec.run.report)
    if run.stopped is not None:
        raise Interrupted(summary["batches"], report)
    return summary


class _Run:
    """What a run has done so far: enough to report it whenever Ctrl-C stops it."""

    def __init__(self) -> None:
        self.stage = "validating"
        self.stopped: str | None = None  # the stage Ctrl-C stopped, if it did
        self.built: list[str] = []
        self.building: str | None = None
        self.loader: Loader | None = None
        self.memory: Any = None
        self.summary: dict[str, Any] = {"batches": 0, "items": 0}

    def report(self, spec: LoaderSpec) -> dict[str, Any]:
        summary = dict(self.summary)
        if self.memory is not None:
            summary.update(_memory_figures(self.memory))
        if self.loader is not None:
            shards = _shards_figures(self.loader)
            if shards is not None:
                summary["shards"] = shards
            mixture = _mixture_figures(self.loader)
            if mixture is not None:
                summary["mixture"] = mixture
        summary["config"] = spec.model_dump(mode="json", by_alias=True)
        if self.stopped is not None:
            summary.update(interrupted=True, stage=self.stopped, built=self.built)
            if self.building is not None:
                summary["building"] = self.building
            if summary["batches"] == 0:  # stopped before the first batch: no rate to speak of
                summary.update(batches_per_s=0.0, items_per_s=0.0)
        return summary


def _mixture_figures(loader: Loader) -> dict[str, Any] | None:
    """Each mixture source's samples drawn and its target, since the run began."""
    from loaderfactory.mixture.dataset import MixtureDataset

    dataset = loader.dataset
    if not isinstance(dataset, MixtureDataset):
        return None
    try:
        per_step = -(-len(dataset) // max(len(loader), 1))
    except TypeError:  # an unsized stage after it: no position to tell
        return None
    position = min(loader.batches_in_epoch * per_step, len(dataset))
    shares = dataset.shares(loader.epoch, position)
    return {
        name: {"drawn": figures["drawn_since_start"], "target": round(figures["target_since_start"], 1)}
        for name, figures in shares.items()
    }


def interrupted_early(out_dir: Path, report_name: str, config: dict[str, Any]) -> Interrupted:
    """Ctrl-C in a run's job before :func:`run_job` began (while validating the config): writes the
    report that says so and returns the :class:`Interrupted` to raise."""
    from loaderfactory.report import write_report

    summary = {
        "batches": 0,
        "items": 0,
        "batches_per_s": 0.0,
        "items_per_s": 0.0,
        "interrupted": True,
        "stage": "validating",
        "built": [],
        "config": config,
    }
    return Interrupted(0, write_report(summary, out_dir / report_name))


def pack_job(spec: LoaderSpec, say: Callable[[str], None]) -> dict[str, Any]:
    """Build the dataset slot alone and write it as shards where ``pack`` says; return what was written.

    Raises:
        ConfigError: a bad ``pack`` field (``pack.out`` already holding shards) or an item that cannot
            be stored (at ``dataset``, naming the item and its field).
    """
    from loaderfactory.errors import ArgumentError
    from loaderfactory.factory import build_dataset
    from loaderfactory.shards.write.encode import PackError
    from loaderfactory.shards.write.pack import pack

    options = spec.pack
    if options.out is None:  # the spec refuses this in pack mode; here for a spec built otherwise
        raise ConfigError(ConfigProblem("pack.out", "run.mode=pack needs pack.out"))
    dataset = build_dataset(spec)
    try:
        result = pack(
            dataset,
            options.out,
            shard_size=options.shard_size,
            format=options.format,
            num_workers=options.num_workers,
            storage_options=options.storage_options,
            progress=spec.run.progress,
            encode=options.encode,
            shuffle=options.shuffle,
            seed=options.seed,
        )
    except ArgumentError as err:
        path = "dataset" if err.argument == "dataset" else f"pack.{err.argument}"
        raise ConfigError(ConfigProblem(path, str(err))) from err
    except PackError as err:
        raise ConfigError(ConfigProblem("dataset", str(err))) from err
    finally:
        _close(dataset)
    say(str(result))
    return {
        "shards": len(result.shards),
        "samples": result.samples,
        "bytes": result.bytes,
        "seconds": result.seconds,
        "index": result.index,
    }


@runs_to_its_end
def _close(component: object) -> None:
    """``component.close()``, where it has one; the command's Ctrl-C waits for its end (a close cut
    short leaves a download pool to run its whole queue as the process exits)."""
    close = getattr(component, "close", None)
    if callable(close):
        close()


def _memory_figures(memory: Any) -> dict[str, Any]:
    return {
        "peak_rss_mb": round(memory.own_peak_rss_mb, 1),  # this process alone
        "peak_memory_mb": round(memory.peak_mb, 1),  # with its workers, shared pages once (PSS)
        "peak_growth_mb": round(memory.growth_mb, 1),  # what building and running added
        "memory_measure": memory.measure,
    }


def _shards_figures(loader: Loader) -> dict[str, Any] | None:
    """What reading the shards cost, summed over the workers, when the pipeline reads a shards
    dataset (whatever wraps it); None otherwise."""
    from loaderfactory.shards.find import find_shards

    dataset = find_shards(list(loader.components.values()))
    return None if dataset is None else dataset.stats()


def no_batch_problem(spec: LoaderSpec, loader: Loader) -> ConfigProblem:
    """Why a run drew no batch, naming the fields to change."""
    dataset = loader.dataset
    try:
        items = f"{len(dataset)} item(s)"
    except TypeError:
        items = "an unknown number of items"
    batch_size = getattr(spec.loader, "batch_size", None)
    drop_last = getattr(spec.loader, "drop_last", None)
    return ConfigProblem(
        "loader",
        f"the run drew no batch: the dataset has {items}, loader.batch_size={batch_size}, "
        f"loader.drop_last={str(drop_last).lower()}; with drop_last an epoch needs at least batch_size "
        "items on each rank: use a longer dataset, a smaller loader.batch_size, or loader.drop_last=false",
    )


def consume(loader: Loader, spec: LoaderSpec) -> dict[str, Any]:
    """Draw ``run.batches`` batches (or ``run.epochs`` epochs), sleeping ``run.step_ms`` per batch."""
    from loaderfactory.progress import ProgressBar

    run = spec.run
    try:
        per_epoch: int | None = len(loader)
    except TypeError:
        per_epoch = None
    total = run.batches if run.batches is not None else (per_epoch * run.epochs if per_epoch else None)
    batches = _batches(loader, run.batches, run.epochs)
    step = run.step_ms / 1000
    with ProgressBar(total=total, unit="batch", disable=not run.progress, file=sys.stderr) as bar:
        for _ in batches:
            if step:
                time.sleep(step)
            bar.update()
    return loader.telemetry()


def _batches(loader: Loader, limit: int | None, epochs: int) -> Iterator[Any]:
    if limit is None:
        return itertools.chain.from_iterable(loader for _ in range(epochs))

    # Keep drawing epochs until `limit` batches; an empty epoch ends the run instead of spinning.
    def endless() -> Iterator[Any]:
        while True:
            empty = True
            for batch in loader:
                empty = False
                yield batch
            if empty:
                return

    return itertools.islice(endless(), limit)
