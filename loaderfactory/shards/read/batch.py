"""A batch of ``ShardsDataset`` samples: each run of consecutive indices in one shard read at once.

torch's map-style fetcher calls ``dataset.__getitems__(indices)`` for a batch when it exists (in the
main process and in workers), which hands it to the process's shard reader (a
:class:`~loaderfactory.shards.read.protocols.BatchSource`). The result is exactly
``[dataset[i] for i in indices]``: a run is located, its shard opened and predownload advanced once,
and a tar run is one read spanning its samples. Each sample becomes what ``dataset[i]`` gives (the
item as packed, or the raw sample) by the dataset's
:class:`~loaderfactory.shards.formats.item_layout.SampleShape`: a rename of its fields. A
shard that cannot be opened raises what ``dataset[i]`` raises for the run's first sample
(without opening it again, and so without its retries again), and storage that still fails after
the retries raises its error naming the run's samples. Anything else that fails in a run is read
again sample by sample, so the error raised is the one ``dataset[i]`` raises, naming the shard's
URL and the sample.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import torch

from loaderfactory.components.data.stacked import StackedItems, batch_tensor
from loaderfactory.shards.errors import StorageError, in_sample
from loaderfactory.shards.formats.tar.stacked import NpyLayout, Target, read_rows, stackable_fields
from loaderfactory.shards.read.cached_shard import Shard
from loaderfactory.shards.read.protocols import BatchSource
from loaderfactory.shards.read.scatter import SCATTERED, read_scattered

Run = tuple[int, int, int, int]
"""(first position in the batch, position after the last, shard number, first sample in the shard);
shard -1: an index out of range, left to ``dataset[i]`` to refuse."""


def batch_runs(ends: Sequence[int], indices: Sequence[int]) -> list[Run]:
    """The runs of consecutive sample indices within one shard, in the batch's order; ``ends`` are
    the shards' cumulative sample counts."""
    length = ends[-1] if ends else 0
    runs: list[Run] = []
    low = high = 0
    shard, previous = -1, -2
    for place, index in enumerate(indices):
        position = index + length if index < 0 else index
        if not 0 <= position < length:
            runs.append((place, place + 1, -1, 0))
            previous = -2
            continue
        if position == previous + 1 and position < high:
            first, _, _, local = runs[-1]
            runs[-1] = (first, place + 1, shard, local)
        else:
            if not low <= position < high:
                shard = bisect.bisect_right(ends, position)
                low, high = (ends[shard - 1] if shard else 0), ends[shard]
            runs.append((place, place + 1, shard, position - low))
        previous = position
    return runs


def read_batch(dataset: BatchSource, indices: Sequence[int]) -> list[Any]:
    """``[dataset.read_sample(i) for i in indices]``, each run of consecutive samples of a shard read
    at once; fixed-size ``.npy`` fields of local tar shards straight into batch tensors
    (``StackedItems``); a shuffled batch's samples one ``preadv`` each (:mod:`.scatter`)."""
    runs = batch_runs(dataset.ends, indices)
    if len(indices) > 1 and all(shard >= 0 for _, _, shard, _ in runs):
        stacked = None
        if len(runs) > SCATTERED * len(indices):  # a shuffled batch: nearly a run per sample
            shard_of = [shard for first, stop, shard, _ in runs for _ in range(first, stop)]
            stacked = read_scattered(dataset, indices, shard_of)
        if stacked is None:
            stacked = _read_stacked(dataset, indices, runs)
        if stacked is not None:
            return stacked
    out: list[Any] = []
    for first, stop, shard, local in runs:
        run = indices[first:stop]
        if shard < 0 or stop - first == 1:
            out.extend(dataset.read_sample(index) for index in run)
        else:
            out.extend(_read_run(dataset, run, shard, local))
    return out


def _read_stacked(dataset: BatchSource, indices: Sequence[int], runs: list[Run]) -> list[Any] | None:
    """The batch with the ``.npy`` fields of its first sample that fit
    (:mod:`loaderfactory.shards.formats.tar.stacked`) read into one tensor each; None where a run is
    not in a local tar shard or does not fit them."""
    targets: dict[str, Target] = {}
    out: list[Any] = []
    shape = dataset.shape
    for first, stop, shard, local in runs:
        tar = _open_run(dataset, indices[first:stop], shard).tar()
        try:
            if tar is None or tar.file() < 0:
                return None
            if not targets:
                targets = _targets(stackable_fields(tar, local), len(indices))
                if not targets:
                    return None
            samples = read_rows(tar, local, stop - first, targets, first)
        except OSError:  # read as usual, which raises the error naming the sample
            return None
        if samples is None:
            return None
        url = dataset.shards[shard].url
        items = shape.items(samples, url)
        if shape.keys and any(shape.absent(item) for item in items):
            return None
        out.extend(items)
    dataset.counters.add("samples", len(out))
    if shape.single:  # a single-value item is the row itself: collated as usual, the rows stacked again
        return out
    return StackedItems(out, {shape.field_of(field): target.tensor for field, target in targets.items()})


def _targets(layouts: dict[str, NpyLayout], count: int) -> dict[str, Target]:
    """A batch tensor of ``count`` rows for each field's layout."""
    targets = {}
    for field, layout in layouts.items():
        tensor = batch_tensor((count, *layout.shape), layout.dtype)
        byte_rows = tensor.view(count, -1).view(torch.uint8).numpy()
        targets[field] = Target(layout, tensor, byte_rows, tensor.unbind(0))
    return targets


def _open_run(dataset: BatchSource, run: Sequence[int], shard: int) -> Shard:
    """Shard ``shard`` opened for ``run``, its failure raised as ``dataset[run[0]]`` raises it."""
    first = run[0] if run[0] >= 0 else run[0] + len(dataset)
    last = run[-1] if run[-1] >= 0 else run[-1] + len(dataset)
    return dataset.open_run(shard, first, last)


def _read_run(dataset: BatchSource, run: Sequence[int], shard: int, local: int) -> list[Any]:
    """The samples of ``run`` (consecutive global indices in ``shard``, from its sample ``local``)."""
    url = dataset.shards[shard].url
    opened = _open_run(dataset, run, shard)
    first = run[0] if run[0] >= 0 else run[0] + len(dataset)
    try:
        samples = opened.sample_run(local, len(run))
    except StorageError as err:  # after the retries: read again one by one, each would retry again
        count = len(run)
        where = (
            f"while reading samples #{local} to #{local + count - 1} of the shard "
            f"(#{first} to #{first + count - 1} overall)"
        )
        raise in_sample(err, where) from err
    except Exception:  # noqa: BLE001 - read again one by one: dataset[i] raises, naming the sample
        return [dataset.read_sample(index) for index in run]
    shape = dataset.shape
    items = shape.items(samples, url)
    if shape.keys and any(shape.absent(item) for item in items):
        # Read again one by one: raises the ShardError naming the missing field.
        return [dataset.read_sample(index) for index in run]
    dataset.counters.add("samples", len(items))
    return items
