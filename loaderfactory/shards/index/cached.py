"""Indexes kept in the shards cache, for remote shards with no index beside them.

A bucket the job cannot write (a public data set, a read-only role) holds no
``loaderfactory-shards.json``, and reading every shard's headers again at each start costs minutes.
With a ``cache.dir``, the index built at the first start is saved there as
``index-<16 hex digits of sha1(where the index would be beside the shards)>.json`` and read at the
next start; shards added to the folder since are indexed alone and added to it. The cache never
evicts it (it evicts only shard files, named ``<16 hex digits>.<shard name>``).

A saved entry holds a shard's sample count, size and version tag (ETag) as they were then. The
index is not the data's own, so a cached copy of a shard is reused only once the store says it
still holds that version (asked once per shard and process); a shard replaced since is caught when
it is opened (:class:`~loaderfactory.shards.errors.ShardChangedError`, or ``ShardError`` for
another sample count), never read from an older copy nor with wrong offsets, which come from the
shard itself. Its entry is then dropped (:func:`forget`), and the next start indexes it anew. (An
entry saved without a tag, by an earlier version, names its copy by the tag the store gives.)
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.index.shard_index import ShardInfo, index_url, load_index, save_index
from loaderfactory.shards.storage.store import Storage
from loaderfactory.shards.storage.urls import check_listing

log = logging.getLogger(__name__)


def cached_index_path(cache_dir: str | Path, urls: Sequence[str]) -> Path:
    """Where the cache keeps the index of ``urls``."""
    digest = hashlib.sha1(index_url(urls).encode()).hexdigest()[:16]
    return Path(cache_dir) / f"index-{digest}.json"


def index_through_cache(
    cache_dir: str | Path,
    urls: Sequence[str],
    storage: Storage,
    build: Callable[[Sequence[str]], list[ShardInfo]],
    listing: str | Sequence[str] = (),
) -> tuple[list[ShardInfo], str, frozenset[str]]:
    """The entries of ``urls`` from the index saved in ``cache_dir``, ``build`` making those it lacks
    (then saved with the rest); with where they came from (the saved file's path, or ``"built"``
    when any was built) and the URLs whose entries were read from the saved file, whose cached
    copies are reused only once the store agrees (:meth:`.ShardCache.expect`). ``listing``: what
    ``urls`` were listed from; a saved shard it stands for that they lack is ShardNotFoundError
    (:func:`loaderfactory.shards.storage.urls.check_listing`)."""
    path = cached_index_path(cache_dir, urls)
    known: dict[str, ShardInfo] = {}
    try:
        known = {info.url: info for info in load_index(str(path), storage)}
    except FileNotFoundError:
        pass
    except ShardError as err:  # written by another version, or damaged: index again, overwrite it
        log.warning("ignoring the cached index: %s", err)
    check_listing(listing, urls, list(known), str(path), f"delete {path} to index them again without it")
    absent = [url for url in urls if url not in known]
    saved = frozenset(urls) - frozenset(absent)
    if not absent:
        log.info("shards index read from the cache: %s", path)
        return [known[url] for url in urls], str(path), saved
    log.info(
        "no index at %s: reading %d shard(s) once to count samples (saved to %s for the next start)",
        index_url(urls),
        len(absent),
        path,
    )
    known.update((info.url, info) for info in build(absent))
    save_index(list(known.values()), str(path), storage)
    return [known[url] for url in urls], "built", saved


def forget(path: str | Path, url: str, storage: Storage) -> None:
    """Drop the entry of ``url`` from the index kept at ``path`` (the next start indexes it anew).

    Processes dropping entries at once may each write the file: an entry one dropped and another
    wrote back is caught again when its shard is next fetched or opened, and dropped again.
    """
    try:
        entries = load_index(str(path), storage)
        if any(info.url == url for info in entries):
            save_index([info for info in entries if info.url != url], str(path), storage)
    except (OSError, ShardError) as err:  # gone, damaged or unwritable: the next start copes with it
        log.warning("could not drop %s from the cached index %s: %s", url, path, err)
