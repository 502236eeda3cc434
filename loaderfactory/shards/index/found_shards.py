"""A dataset's shards found: its URLs listed, and their index read, given, kept in the cache or built."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.formats.item_layout import ItemLayout
from loaderfactory.shards.index.cached import cached_index_path, index_through_cache
from loaderfactory.shards.index.shard_index import (
    ShardInfo,
    build_index,
    find_shard_index,
    index_url,
    read_index,
)
from loaderfactory.shards.storage.store import Storage, is_remote
from loaderfactory.shards.storage.urls import check_listing, expand_urls

log = logging.getLogger(__name__)
KeptIndex = tuple[str, frozenset[str]]
"""The path of the index kept in ``cache_dir`` that a dataset's entries went through, and the URLs
whose entries were read from it (not built at this start)."""


class FoundShards(NamedTuple):
    """The shards' URLs, their index entries, where the entries came from (``ShardsDataset.
    index_source``), the index kept in ``cache_dir`` they went through, and the items' layout the
    index records (written by ``pack``)."""

    urls: list[str]
    shards: list[ShardInfo]
    source: str
    kept: KeptIndex | None
    items: ItemLayout | None


def find_shards(
    urls: str | Sequence[str],
    index: str | Sequence[ShardInfo] | None,
    cache_dir: str | None,
    storage: Storage,
    progress: bool,
    shard_format: str,
) -> FoundShards:
    """The shards of ``urls`` and their index (see ``ShardsDataset``'s ``index`` and ``cache_dir``);
    FileNotFoundError when ``urls`` match none, ShardNotFoundError for a shard an index lists under
    the folder, prefix or glob ``urls`` that is gone."""
    expanded = expand_urls(urls, storage)
    if not expanded:
        raise FileNotFoundError(f"{urls!r}: matched no shards")

    def build(some: Sequence[str]) -> list[ShardInfo]:
        return build_index(some, storage, progress, forced=shard_format)

    if index is None:
        found = find_shard_index(expanded, storage, urls)
        if found is not None:
            return FoundShards(expanded, found.shards, index_url(expanded), None, found.items)
        if cache_dir is not None and any(is_remote(url) for url in expanded):
            entries, source, saved = index_through_cache(cache_dir, expanded, storage, build, urls)
            kept = (str(cached_index_path(cache_dir, expanded)), saved)
            return FoundShards(expanded, entries, source, kept, None)
        where, count = index_url(expanded), len(expanded)
        log.info("no index at %s: reading %d shard(s) once to count samples", where, count)
        return FoundShards(expanded, build(expanded), "built", None, None)
    return _given(expanded, index, storage, urls)


def _given(
    urls: list[str], index: str | Sequence[ShardInfo], storage: Storage, listing: str | Sequence[str]
) -> FoundShards:
    """The entries of ``urls`` in the index at URL ``index``, or in the entries given."""
    items = None
    if isinstance(index, str):
        read = read_index(index, storage)
        entries, items = read.shards, read.items
    else:
        entries = list(index)
    known = {info.url: info for info in entries}
    named = index if isinstance(index, str) else "(given)"
    check_listing(listing, urls, list(known), named)
    absent = [url for url in urls if url not in known]
    if absent:
        missing = f"{len(absent)} shard(s) missing"
        raise ShardError(f"index {named} lists no {absent[0]!r} ({missing}); index the shards again")
    source = index if isinstance(index, str) else "given"
    return FoundShards(urls, [known[url] for url in urls], source, None, items)
