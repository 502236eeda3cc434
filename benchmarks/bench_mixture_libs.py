"""bench_mixture.py's runs: the same three in-memory sources mixed by loaderfactory, torchdata.nodes
and litdata, read for throughput and resumed at a position.

Every source item is a dict ``{"source": s, "index": i}``, so a batch is two int tensors and the
figures show what mixing costs, not what reading costs. The peers are imported here, lazily.
"""

from __future__ import annotations

import copy
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

NAMES = ("web", "code", "books")


@dataclass
class Setup:
    """What every run reads: the sources (lists of items), their weights, the batch size."""

    sizes: list[int]
    weights: list[float]
    batch: int
    data: Path
    resume_epoch: int
    seed: int = 0

    def __post_init__(self) -> None:
        self.sources = [[{"source": s, "index": i} for i in range(n)] for s, n in enumerate(self.sizes)]
        self.named = dict(zip(NAMES, self.sources, strict=True))
        self.weighted = dict(zip(NAMES, self.weights, strict=True))


def _take_batches(batches: Iterator[Any], draws: int) -> int:
    """Read collated batches (dicts of tensors) until ``draws`` items came; the count read."""
    taken = 0
    for batch in batches:
        taken += len(batch["index"])
        if taken >= draws:
            break
    return taken


# -- loaderfactory ----------------------------------------------------------------------------------


def _mixture(setup: Setup, stop: int) -> Any:
    from loaderfactory.mixture.dataset import MixtureDataset

    return MixtureDataset(setup.named, [(0, setup.weighted)], stop=stop, seed=setup.seed)


def _loader_config(setup: Setup, shuffle: bool = False) -> dict[str, Any]:
    return {"loader": {"kind": "torch", "batch_size": setup.batch, "num_workers": 0, "shuffle": shuffle}}


def ours_dataset(setup: Setup, draws: int) -> int:
    """``MixtureDataset.__getitems__`` over consecutive batches of positions (what a loader asks)."""
    dataset = _mixture(setup, draws)
    for start in range(0, draws, setup.batch):
        dataset.__getitems__(list(range(start, min(start + setup.batch, draws))))
    return draws


def one_source_dataset(setup: Setup, draws: int) -> int:
    """The largest source alone, read in batches through a new random order each pass."""
    source, read = setup.sources[0], 0
    rng = np.random.default_rng(setup.seed)
    while read < draws:
        order = rng.permutation(len(source))
        for start in range(0, min(len(source), draws - read), setup.batch):
            batch = order[start : min(start + setup.batch, draws - read)].tolist()
            items = [source[i] for i in batch]
            read += len(items)
    return read


def ours_loader(setup: Setup, draws: int) -> int:
    """``build_loader`` (torch kind, workers 0) over the mixture: one epoch of ``draws`` positions."""
    from loaderfactory import build_loader

    with build_loader(_loader_config(setup), dataset=_mixture(setup, draws)) as loader:
        return _take_batches(iter(loader), draws)


def one_source_loader(setup: Setup, draws: int) -> int:
    """``build_loader`` (torch kind, workers 0, shuffled) over the largest source alone."""
    from loaderfactory import build_loader

    with build_loader(_loader_config(setup, shuffle=True), dataset=setup.sources[0]) as loader:
        return _take_batches((batch for _ in range(draws) for batch in loader), draws)


def ours_resume(setup: Setup, position: int) -> tuple[Callable[[], Any], Callable[[Any], bool]]:
    """A loader state at ``position`` of an epoch of ``resume_epoch`` positions (the state is a
    position: one made after a batch, moved there), and a check that the resumed batch is
    exactly the mixture's positions from there."""
    from loaderfactory import build_loader

    stop = setup.resume_epoch
    with build_loader(_loader_config(setup), dataset=_mixture(setup, setup.batch)) as loader:
        next(iter(loader))
        state = loader.state_dict()
    state["batches_in_epoch"] = position // setup.batch
    state["slots"]["dataset"]["state"]["length"] = stop
    state["slots"]["loader"]["state"].update(position=position, steps=position // setup.batch, length=stop)

    def resume() -> Any:
        with build_loader(_loader_config(setup), dataset=_mixture(setup, stop)) as resumed:
            resumed.load_state_dict(copy.deepcopy(state))
            return next(iter(resumed))

    def exact(batch: Any) -> bool:
        wanted = _mixture(setup, stop).__getitems__(list(range(position, position + setup.batch)))
        got = list(zip(batch["source"].tolist(), batch["index"].tolist(), strict=True))
        return got == [(item["source"], item["index"]) for item in wanted]

    return resume, exact


def ours_dataset_resume(setup: Setup, position: int) -> Callable[[], Any]:
    """The mixture alone: built, then the batch at ``position`` read (what a worker does first)."""

    def resume() -> Any:
        dataset = _mixture(setup, setup.resume_epoch)
        return dataset.__getitems__(list(range(position, position + setup.batch)))

    return resume


# -- torchdata.nodes --------------------------------------------------------------------------------


def _torchdata_sampler(setup: Setup) -> Any:
    from torchdata.nodes import IterableWrapper, MultiNodeWeightedSampler

    nodes = {name: IterableWrapper(source) for name, source in setup.named.items()}
    # CYCLE_FOREVER: a source that runs out starts again, so any number of draws is one epoch.
    return MultiNodeWeightedSampler(
        nodes, setup.weighted, stop_criteria="CYCLE_FOREVER", rank=0, world_size=1, seed=setup.seed
    )


def torchdata_items(setup: Setup, draws: int) -> int:
    """``MultiNodeWeightedSampler`` over ``IterableWrapper`` sources: ``draws`` items, one by one."""
    sampler = _torchdata_sampler(setup)
    sampler.reset()
    for _ in range(draws):
        sampler.next()
    return draws


def torchdata_loader(setup: Setup, draws: int) -> int:
    """The sampler batched and collated: ``Loader(Mapper(Batcher(sampler, batch), default_collate))``."""
    from torch.utils.data import default_collate
    from torchdata.nodes import Batcher, Loader, Mapper

    loader = Loader(Mapper(Batcher(_torchdata_sampler(setup), setup.batch), default_collate))
    return _take_batches(iter(loader), draws)


def torchdata_resume(setup: Setup, position: int) -> Callable[[], Any]:
    """The sampler's ``state_dict()`` after ``position`` draws (made by drawing them), restored with
    ``reset(state)`` into a new sampler, then its next item."""
    sampler = _torchdata_sampler(setup)
    sampler.reset()
    for _ in range(position):
        sampler.next()
    state = sampler.state_dict()

    def resume() -> Any:
        resumed = _torchdata_sampler(setup)
        resumed.reset(copy.deepcopy(state))
        return resumed.next()

    return resume


# -- litdata ----------------------------------------------------------------------------------------


def litdata_folders(setup: Setup) -> list[Path]:
    """The sources as litdata chunks under ``--data`` (written once, reused), by ``BinaryWriter``, the
    writer ``litdata.optimize`` runs in each of its workers (``optimize`` itself spawns processes
    that took minutes for the shards benchmark's items)."""
    from litdata.streaming.writer import BinaryWriter

    folders = []
    for s, source in enumerate(setup.sources):
        folder = setup.data / "litdata" / f"{NAMES[s]}-{len(source)}"
        if not (folder / "index.json").exists():
            print(f"writing {len(source):,} items to {folder}", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            writer = BinaryWriter(str(folder), chunk_bytes="64MB")
            for index, item in enumerate(source):
                writer[index] = item
            writer.done()
            writer.merge()
        folders.append(folder)
    return folders


def _litdata_loader(setup: Setup) -> Any:
    from litdata import CombinedStreamingDataset, StreamingDataLoader, StreamingDataset

    datasets = [StreamingDataset(str(folder), shuffle=True) for folder in litdata_folders(setup)]
    combined = CombinedStreamingDataset(
        datasets, weights=setup.weights, iterate_over_all=False, seed=setup.seed
    )
    return StreamingDataLoader(combined, batch_size=setup.batch, num_workers=0)


def litdata_loader(setup: Setup, draws: int) -> int:
    """``StreamingDataLoader(CombinedStreamingDataset(weights, iterate_over_all=False))``; its epoch
    ends when a source runs out, and the next one starts."""
    loader = _litdata_loader(setup)
    return _take_batches((batch for _ in range(draws) for batch in loader), draws)


def litdata_states(setup: Setup, positions: list[int]) -> dict[int, dict[str, Any]]:
    """The loader's ``state_dict()`` after the first batch at or past each position (reached by
    reading; litdata's epoch here ends near 250,000 draws, when ``books`` runs out)."""
    loader, states, taken = _litdata_loader(setup), {}, 0
    wanted = sorted(positions)
    for batch in loader:
        taken += len(batch["index"])
        while wanted and taken >= wanted[0]:
            states[wanted.pop(0)] = loader.state_dict()
        if not wanted:
            break
    return states


def litdata_resume(setup: Setup, state: dict[str, Any]) -> Callable[[], Any]:
    """A new loader, ``load_state_dict(state)``, its first batch: the combined dataset replays one
    weighted draw per sample the state counts before it reads."""

    def resume() -> Any:
        loader = _litdata_loader(setup)
        loader.load_state_dict(copy.deepcopy(state))
        return next(iter(loader))

    return resume


def scaled_state(state: dict[str, Any], position: int) -> dict[str, Any]:
    """``state`` with its per-source draw counts (what the replay iterates over) scaled to sum to
    ``position``; each source's own position stays where it was."""
    scaled = copy.deepcopy(state)
    for worker, counts in scaled["num_samples_yielded"].items():
        factor = position / sum(counts)
        scaled["num_samples_yielded"][worker] = [round(count * factor) for count in counts]
    return scaled


def timed(function: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result
