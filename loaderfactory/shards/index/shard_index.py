"""The shards index: each shard's URL, format, sample count and byte size, in one small JSON file.

The file is ``loaderfactory-shards.json`` in the shards' common folder (``s3://bucket/train/`` →
``s3://bucket/train/loaderfactory-shards.json``; not ``index.json``, which Mosaic streaming writes).
Shard URLs under that folder are stored relative to it, so the folder can move. Its layout::

    {"format": "loaderfactory.shards-index/1",
     "shards": [{"url": "train-000000.tar", "format": "tar", "samples": 1000, "bytes": 67108864,
                 "version": "etag:9b2cf535f27731c974343645a3985328"}, ...]}

``version`` (optional) is what the store said identifies the object when it was indexed (an ETag or
a modification time, :mod:`loaderfactory.shards.storage.object_version`); absent for local files.
With ``bytes`` it names the shard's cached copy, so a shard replaced since is fetched again, never
read from an older copy.

``items`` (optional) is written by ``pack``: how each item was laid out as fields, so the reader
gives the items back as they were packed (:mod:`loaderfactory.shards.formats.item_layout`)::

    "items": {"type": "dict", "fields": {"image": "image.npy", "label": "label.cls"}}
    "items": {"type": "tuple", "fields": ["0.npy", "1.cls"]}     (also "list"; "value": one field)

An index without it (shards written elsewhere, or by an older ``pack``) reads as before: each
sample's stored fields (``image.npy``) plus ``__key__`` and ``__url__``. Readers that predate the
record ignore it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from loaderfactory.progress import ProgressBar
from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.formats.item_layout import ItemLayout, layout_from_json
from loaderfactory.shards.formats.parquet import count_parquet_rows
from loaderfactory.shards.formats.tar.shard import scan_tar
from loaderfactory.shards.storage.store import Storage
from loaderfactory.shards.storage.urls import check_listing

INDEX_FORMAT = "loaderfactory.shards-index/1"
INDEX_NAME = "loaderfactory-shards.json"
FORMATS = {".tar": "tar", ".parquet": "parquet"}
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardInfo:
    """One shard as the index knows it."""

    url: str
    format: str
    samples: int
    bytes: int
    version: str = ""
    """The store's tag of the object when it was indexed
    (:mod:`loaderfactory.shards.storage.object_version`); ``""``: unknown."""


def shard_format(url: str, forced: str = "auto") -> str:
    """``"tar"`` or ``"parquet"`` from the URL's extension; ``forced`` (not ``"auto"``) wins."""
    if forced != "auto":
        return forced
    for suffix, name in FORMATS.items():
        if url.endswith(suffix):
            return name
    raise ShardError(f"{url}: unknown shard format; shard names end in {' or '.join(FORMATS)}")


def describe_shard(storage: Storage, url: str, forced: str = "auto") -> ShardInfo:
    """Read the shard at ``url`` once (a tar's headers, a Parquet footer) and describe it."""
    fmt = shard_format(url, forced)
    samples = len(scan_tar(storage, url)) if fmt == "tar" else count_parquet_rows(storage, url)
    size, version = storage.version(url)
    return ShardInfo(url, fmt, samples, size, version)


def build_index(
    urls: Sequence[str], storage: Storage, progress: bool = True, forced: str = "auto"
) -> list[ShardInfo]:
    """Describe every shard, in order, with a progress bar on stderr (``progress=False``: none);
    ``forced``: ``"tar"`` or ``"parquet"`` whatever the extension."""
    with ProgressBar(urls, desc="indexing shards", unit="shard", disable=not progress) as bar:
        return [describe_shard(storage, url, forced) for url in bar]


def index_url(urls: Sequence[str]) -> str:
    """Where the index of ``urls`` lives: ``loaderfactory-shards.json`` in their common folder."""
    common = _folder_of(urls)
    return f"{common}{INDEX_NAME}"


def _folder_of(urls: Sequence[str]) -> str:
    prefix = urls[0] if len(urls) == 1 else _common_prefix(urls)
    return prefix[: prefix.rfind("/") + 1]


def _common_prefix(urls: Sequence[str]) -> str:
    first, last = min(urls), max(urls)
    size = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first))
    return first[:size]


@dataclass(frozen=True)
class ShardIndex:
    """An index as read: its shards, and the items' layout when ``pack`` wrote it."""

    shards: list[ShardInfo]
    items: ItemLayout | None = None


def save_index(
    shards: Sequence[ShardInfo], url: str, storage: Storage, items: ItemLayout | None = None
) -> None:
    """Write the index of ``shards`` to ``url`` (shards under its folder stored relative to it),
    with the items' layout when given (``pack`` gives it)."""
    folder = url[: url.rfind("/") + 1]
    entries = [_entry_of(s, folder) for s in shards]
    data: dict[str, Any] = {"format": INDEX_FORMAT, "shards": entries}
    if items is not None:
        data["items"] = items.to_json()
    storage.write(url, json.dumps(data, indent=1).encode())


def _entry_of(shard: ShardInfo, folder: str) -> dict[str, Any]:
    entry = asdict(shard) | {"url": _relative(shard.url, folder)}
    if not shard.version:
        del entry["version"]
    return entry


def _relative(url: str, folder: str) -> str:
    return url[len(folder) :] if folder and url.startswith(folder) else url


def load_index(url: str, storage: Storage) -> list[ShardInfo]:
    """Read and check the index at ``url``; ShardError naming the file and the entry that is wrong."""
    return read_index(url, storage).shards


def read_index(url: str, storage: Storage) -> ShardIndex:
    """The index at ``url``, its items' layout included; ShardError naming the file and the entry
    that is wrong."""
    try:
        data = json.loads(storage.read(url))
    except json.JSONDecodeError as err:
        raise ShardError(f"{url}: not a JSON shards index ({err}); write it again") from err
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ShardError(f"{url}: index format {found!r} is not {INDEX_FORMAT!r}; write it again")
    folder = url[: url.rfind("/") + 1]
    entries = data.get("shards")
    if not isinstance(entries, list):
        raise ShardError(f"{url}: 'shards' must be a list of shard entries")
    shards = [_entry(entry, number, url, folder) for number, entry in enumerate(entries)]
    if data.get("items") is None:
        return ShardIndex(shards)
    try:
        return ShardIndex(shards, layout_from_json(data["items"], url))
    except ValueError as err:
        raise ShardError(f"{err}; write the shards again with pack") from err


def _entry(entry: Any, number: int, url: str, folder: str) -> ShardInfo:
    fields = {"url": str, "format": str, "samples": int, "bytes": int}
    if not isinstance(entry, dict) or any(not isinstance(entry.get(k), t) for k, t in fields.items()):
        raise ShardError(
            f"{url}: shards[{number}] = {entry!r} needs url, format (str), samples and bytes (int)"
        )
    if entry["format"] not in FORMATS.values() or entry["samples"] < 0 or entry["bytes"] < 0:
        raise ShardError(f"{url}: shards[{number}] = {entry!r}: format tar|parquet, counts ≥ 0")
    version = entry.get("version", "")
    if not isinstance(version, str):
        raise ShardError(f"{url}: shards[{number}] = {entry!r}: version must be a string")
    shard_url = (
        entry["url"] if "://" in entry["url"] or entry["url"].startswith("/") else folder + entry["url"]
    )
    return ShardInfo(shard_url, entry["format"], entry["samples"], entry["bytes"], version)


def find_index(
    urls: Sequence[str], storage: Storage, listing: str | Sequence[str] = ()
) -> list[ShardInfo] | None:
    """The index beside ``urls`` restricted to them, in their order; None when absent or not covering them.

    ``listing``: what ``urls`` were listed from (a folder, prefix or glob); a shard of the index that
    it stands for but ``urls`` lack is ShardNotFoundError
    (see :func:`loaderfactory.shards.storage.urls.check_listing`).
    """
    found = find_shard_index(urls, storage, listing)
    return None if found is None else found.shards


def find_shard_index(
    urls: Sequence[str], storage: Storage, listing: str | Sequence[str] = ()
) -> ShardIndex | None:
    """:func:`find_index`, with the items' layout the index records."""
    where = index_url(urls)
    try:
        index = read_index(where, storage)
    except FileNotFoundError:
        return None
    known = {info.url: info for info in index.shards}
    check_listing(listing, urls, list(known), where)
    if any(url not in known for url in urls):
        log.info("%s does not list every shard asked for; indexing them again", where)
        return None
    return ShardIndex([known[url] for url in urls], index.items)
