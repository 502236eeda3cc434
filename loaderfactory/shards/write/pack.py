"""``pack``: write any dataset as shards (webdataset tar or Parquet) and their index, locally or to S3.

Items are read (and their fields encoded, see :mod:`loaderfactory.shards.write.encode`) in torch
``DataLoader`` worker processes, in order; this process cuts them into shards of at most
``shard_size`` bytes (a single item bigger than that gets a shard of its own), named
``shard-000000.tar`` (or ``.parquet``), and writes ``loaderfactory-shards.json`` beside them last.
Each shard is built in memory (one shard of memory) and written whole through :class:`Storage`: a
local file under a temporary name then renamed, an S3 object in one upload (visible once complete);
so a failing item leaves no partial shard, and no index. The index records the items' layout
(:mod:`loaderfactory.shards.formats.item_layout`), so the reader gives each item back as it was packed.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, Dataset, IterableDataset

from loaderfactory.components.order import permutation
from loaderfactory.components.workers.torch_internals import finish_shutdown
from loaderfactory.errors import ArgumentError
from loaderfactory.progress import ProgressBar
from loaderfactory.shards.formats.item_layout import ItemLayout, LayoutRecorder, item_type
from loaderfactory.shards.formats.tar.members import members_bytes, members_url
from loaderfactory.shards.index.shard_index import INDEX_NAME, ShardInfo, save_index
from loaderfactory.shards.storage.store import Storage, split_scheme
from loaderfactory.shards.storage.urls import is_shard
from loaderfactory.shards.write.encode import Fields, PackError, item_fields
from loaderfactory.shards.write.images import ImageEncoding
from loaderfactory.shards.write.writers import BUILDERS, Sample, ShardBuilder, TarShardBuilder

SHARD_PREFIX = "shard-"
Encoded = tuple[int, str, Fields]
"""An item as the workers hand it over: its number, its type
(:func:`loaderfactory.shards.formats.item_layout.item_type`) and its encoded fields."""


@dataclass(frozen=True)
class PackResult:
    """What :func:`pack` wrote."""

    index: str
    """The URL of the index, ``<out>/loaderfactory-shards.json``."""
    shards: list[ShardInfo]
    seconds: float

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def __str__(self) -> str:
        rate = self.bytes / 2**20 / self.seconds if self.seconds > 0 else 0.0
        return (
            f"wrote {len(self.shards)} shard(s), {self.samples} samples, {self.bytes} bytes "
            f"in {self.seconds:.2f} s ({rate:.1f} MiB/s); index: {self.index}"
        )


def pack(
    dataset: Any,
    out: str,
    shard_size: int | str = "256MiB",
    format: str = "tar",  # shadows the builtin on purpose: the name pack.format and the issue use
    num_workers: int = 0,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = True,
    encode: Mapping[str, Any] | None = None,
    shuffle: bool = False,
    seed: int = 0,
) -> PackResult:
    """Write ``dataset`` as shards in the folder or prefix ``out`` and index them.

    Args:
        dataset: a map-style dataset (``len`` and ``[i]``) or an iterable of items; item ``i``
            becomes the sample with ``__key__`` ``i`` zero-padded (``000042``). Every item is a
            dict, or every item a tuple, a list or a single value: the reader gives each back so.
        out: a local folder, ``file://`` or ``s3://bucket/prefix`` (``gs://`` too); it must hold
            no shards yet.
        shard_size: the most bytes per shard, an int or a size string (``"256MiB"``).
        format: ``"tar"`` (webdataset) or ``"parquet"`` (every item must have the same fields).
        num_workers: worker processes reading and encoding items (map-style datasets only).
        storage_options: settings for remote storage (``endpoint_url``, ``key``, ``secret``, ...).
        progress: a tqdm bar on stderr.
        encode: image fields stored encoded, field → ``"jpg"`` (``"jpeg"``, ``"png"``, ``"webp"``)
            or ``{"format": "jpg", "quality": 90}``: bytes are stored as they are under that
            extension (checked to be that format), PIL images encoded so (jpg, webp at quality 95
            unless given). PIL images are stored encoded without it too: as the file they were
            opened from, else in their own format, else PNG (:mod:`loaderfactory.shards.write.images`).
        shuffle: write the items in a random order seeded by ``seed`` (map-style datasets only), so
            that shards of data stored in class order each hold every class; an item keeps its
            dataset index as its key (``__key__``), so ids stay traceable to the dataset.
        seed: the seed of that order (the same seed, the same shards).

    Raises:
        ArgumentError: a bad argument, named (``out`` already holding shards, say).
        PackError: an item that cannot be stored, naming the item and its field; an item of
            another type than the first (a tuple among dicts).
    """
    limit = shard_limit(shard_size)
    encodings = image_encodings(encode)
    if format not in BUILDERS:
        raise ArgumentError("format", f"format must be one of {', '.join(BUILDERS)}, got {format!r}")
    if num_workers < 0:
        raise ArgumentError("num_workers", f"num_workers must be ≥ 0, got {num_workers}")
    storage = Storage(storage_options)
    folder = out if out.endswith("/") else f"{out}/"
    _refuse_written(storage, folder)
    start = time.perf_counter()
    total, items = _encoded_items(dataset, num_workers, encodings, shuffle, seed)
    width = max(6, len(str(total - 1))) if total else 9
    with ProgressBar(total=total, desc="packing", unit="item", disable=not progress) as bar:
        try:
            shards, layout = _write_shards(items, format, limit, width, storage, folder, bar)
        finally:
            items.close()
    index = f"{folder}{INDEX_NAME}"
    save_index(shards, index, storage, layout)
    return PackResult(index, shards, time.perf_counter() - start)


def shard_limit(shard_size: int | str) -> int:
    """``shard_size`` in bytes: an int as it is, a size string parsed (``"64MiB"``)."""
    if isinstance(shard_size, str):
        from loaderfactory.sizes import parse_size  # pydantic only for a size string

        try:
            shard_size = int(parse_size(shard_size))
        except ValueError as err:
            raise ArgumentError("shard_size", f"shard_size must be a size like '256MiB': {err}") from err
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise ArgumentError("shard_size", f"shard_size must be a size ≥ 1 byte, got {shard_size!r}")
    return shard_size


def image_encodings(encode: Mapping[str, Any] | None) -> dict[str, ImageEncoding]:
    """``encode`` checked (by the ``pack.encode`` spec's rule): field → :class:`ImageEncoding`."""
    if not encode:
        return {}
    from loaderfactory.config.specs.pack import image_encodings as checked  # pydantic only when given

    try:
        specs = checked(encode)
    except ValueError as err:
        raise ArgumentError("encode", str(err)) from err
    return {field: ImageEncoding(spec.format, spec.quality) for field, spec in specs.items()}


def _refuse_written(storage: Storage, folder: str) -> None:
    """Refuse a folder already holding shards (any ``.tar`` or ``.parquet`` file under it, in
    subfolders too) or an index: a reader of the folder lists every one of them beside the new ones."""
    try:
        urls = storage.list(folder)
    except FileNotFoundError:
        return
    names = [posixpath.relpath(url, folder) for url in urls]
    old = sorted(name for name in names if is_shard(name) or name == INDEX_NAME)
    if old:
        shown = ", ".join(old[:3]) + (f", ... ({len(old)} files)" if len(old) > 3 else "")
        raise ArgumentError(
            "out",
            f"the folder {folder} already holds shards ({shown}); a reader of the folder would list "
            "them beside the new ones: delete them, or choose a folder without .tar or .parquet files",
        )


def _write_shards(
    items: Iterator[Encoded],
    fmt: str,
    limit: int,
    width: int,
    storage: Storage,
    folder: str,
    bar: Any,
) -> tuple[list[ShardInfo], ItemLayout | None]:
    """Cut the items into shards of at most ``limit`` bytes, writing each as it fills; the shards
    and the items' layout."""
    shards: list[ShardInfo] = []
    builder: ShardBuilder = BUILDERS[fmt]()
    first: tuple[int, list[str]] | None = None
    recorder = LayoutRecorder()
    for index, kind, fields in items:
        try:
            recorder.add(index, kind, fields)
        except ValueError as err:
            raise PackError(str(err)) from err
        if builder.same_fields:
            first = first or (index, list(fields))
            _check_same_fields(first, index, fields)
        sample: Sample = (str(index).zfill(width), fields)
        if builder.samples and builder.size + builder.added_size(sample) > limit:
            builder = _flush(builder, fmt, limit, storage, folder, shards)
        builder.add(sample)
        bar.update()
    while builder.samples:
        builder = _flush(builder, fmt, limit, storage, folder, shards)
    return shards, recorder.layout()


def _check_same_fields(first: tuple[int, list[str]], index: int, fields: Fields) -> None:
    if list(fields) != first[1]:
        raise PackError(
            f"item {index}: fields {list(fields)} differ from item {first[0]}'s {first[1]}; a Parquet "
            "shard has the same columns in every row: give every item the same fields, or use format='tar'"
        )


def _flush(
    builder: ShardBuilder, fmt: str, limit: int, storage: Storage, folder: str, shards: list[ShardInfo]
) -> ShardBuilder:
    """Write the builder's shard; a new builder, holding the samples that did not fit."""
    data, rest = builder.finish(limit)
    url = f"{folder}{SHARD_PREFIX}{len(shards):06d}{BUILDERS[fmt].suffix}"
    storage.write(url, data)
    if isinstance(builder, TarShardBuilder) and split_scheme(url)[0] == "file":
        storage.write(members_url(url), members_bytes(builder.members, len(data)))  # after: newer
    shards.append(ShardInfo(url, fmt, builder.samples - len(rest), len(data)))
    fresh: ShardBuilder = BUILDERS[fmt]()
    for sample in rest:
        fresh.add(sample)
    return fresh


class _EncodedItems(Dataset[Encoded]):
    """``(i, type of item i, its fields)``: the dataset read and encoded where it is read (in the
    workers)."""

    def __init__(self, dataset: Any, encode: Mapping[str, ImageEncoding]) -> None:
        self.dataset, self.encode = dataset, encode

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Encoded:
        return _encode(self.dataset, index, self.encode)


def _encode(dataset: Any, index: int, encode: Mapping[str, ImageEncoding]) -> Encoded:
    try:
        item = dataset[index]
    except Exception as err:
        raise PackError(f"item {index}: the dataset raised {type(err).__name__}: {err}") from err
    return _encoded(item, index, encode)


def _encoded(item: Any, index: int, encode: Mapping[str, ImageEncoding]) -> Encoded:
    return index, item_type(item), item_fields(item, index, encode)


def _keep(sample: Any) -> Any:
    """No collation: the samples pass as they are (torch's default would convert numpy arrays)."""
    return sample


class _Items:
    """The encoded items in order, and a ``close`` that stops the workers even on an error."""

    def __init__(self, iterator: Iterator[Encoded], workers: Any = None) -> None:
        self._iterator, self._workers = iterator, workers

    def __iter__(self) -> Iterator[Encoded]:
        return self._iterator

    def __next__(self) -> Encoded:
        return next(self._iterator)

    def close(self) -> None:
        if self._workers is not None:
            finish_shutdown(self._workers)
            self._workers = None


def _encoded_items(
    dataset: Any, num_workers: int, encode: Mapping[str, ImageEncoding], shuffle: bool, seed: int
) -> tuple[int | None, _Items]:
    """The number of items (None when unknown) and the encoded items, in order (in a permutation
    seeded by ``seed`` with ``shuffle``)."""
    map_style = not isinstance(dataset, IterableDataset) and hasattr(dataset, "__getitem__")
    if map_style and hasattr(dataset, "__len__"):
        total = len(dataset)
        order = permutation(total, seed, 0) if shuffle else range(total)
        if num_workers == 0:
            return total, _Items(_encode(dataset, i, encode) for i in order)
        loader = DataLoader(
            _EncodedItems(dataset, encode),
            batch_size=None,
            sampler=order,
            num_workers=num_workers,
            collate_fn=_keep,
        )
        workers = iter(loader)
        return total, _Items(workers, workers)
    if not hasattr(dataset, "__iter__"):
        raise ArgumentError(
            "dataset", f"a {type(dataset).__name__} is no dataset: it has neither len() and [i] nor iter()"
        )
    if shuffle:
        raise ArgumentError(
            "shuffle",
            "shuffle needs a map-style dataset (len() and [i]) to permute; an iterable one is written "
            "in the order it yields: set shuffle=False",
        )
    if num_workers:
        raise ArgumentError(
            "num_workers",
            "num_workers must be 0 for an iterable dataset, which this process reads (workers would "
            "each read all of it); or give a map-style dataset (len() and [i])",
        )
    return None, _Items(_encoded(item, i, encode) for i, item in enumerate(dataset))
