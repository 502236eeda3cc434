"""The shards cache serves the version of a shard its index names, whole, or fails saying what to do.

A copy is named by the shard's URL, size and version tag (ETag): a shard replaced in the bucket is
fetched again, a short answer from a server is never kept, and a cache folder removed or replaced
mid-epoch is a CacheError naming it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from counting_http_server import CountingRangeHandler, serving
from s3_server import S3Server
from shards_data import id_samples, tar_bytes, write_indexed_tar_shards, write_tar_shards

import loaderfactory
from loaderfactory.shards import (
    CacheError,
    ShardChangedError,
    Storage,
    StorageError,
    build_index,
    index_url,
    load_index,
    save_index,
)


def _config(urls: Any, cache_dir: Path, **dataset: Any) -> dict[str, Any]:
    """One worker-less epoch in stored order through ``cache_dir``, batches of 2."""
    shards = {"kind": "shards", "urls": urls, "cache": {"dir": str(cache_dir)}, **dataset}
    return {
        "dataset": shards,
        "loader": {"kind": "torch", "batch_size": 2, "num_workers": 0},
        "run": {"progress": False},
    }


def _ids(config: dict[str, Any]) -> Counter[int]:
    with loaderfactory.build_loader(config) as loader:
        return Counter(int(i) for batch in loader for i in batch["cls"])


def _put_indexed(s3: S3Server, prefix: str, first_id: int, padding: int) -> list[str]:
    """Two shards of 5 samples (ids from ``first_id``, each sample ``padding`` bytes of ``txt``) and
    their index, beside them in the bucket, as ``pack`` writes them."""
    storage = Storage(s3.storage_options)
    urls = [s3.url(f"{prefix}/train-{n:06d}.tar") for n in range(2)]
    for number, url in enumerate(urls):
        samples = id_samples(first_id + 5 * number, 5)
        storage.write(url, tar_bytes([{**s, "txt": b"x" * padding} for s in samples]))
    save_index(build_index(urls, storage, progress=False), index_url(urls), storage)
    return urls


@pytest.mark.parametrize("padding", [600, 0], ids=["another size", "same size, another ETag"])
def test_a_shard_replaced_in_the_bucket_is_fetched_again(
    s3: S3Server, fsspec_io_thread: None, tmp_path: Path, padding: int
) -> None:
    """Shards and index rewritten (ids 100..109 where 0..9 were), same cache.dir: the next run reads
    the new shards, each id once; the copies of the old ones are never read again."""
    prefix, cache_dir = f"versions/replaced-{padding}", tmp_path / "cache"
    urls = _put_indexed(s3, prefix, 0, 0)
    config = _config(s3.url(f"{prefix}/"), cache_dir, storage_options=s3.storage_options)
    assert _ids(config) == Counter(range(10))
    before = load_index(index_url(urls), Storage(s3.storage_options))
    _put_indexed(s3, prefix, 100, padding)
    assert _ids(config) == Counter(range(100, 110))
    after = load_index(index_url(urls), Storage(s3.storage_options))
    assert (before[0].bytes != after[0].bytes) == bool(padding)
    assert before[0].version != after[0].version
    assert len(list(cache_dir.glob("*.train-000000.tar"))) == 2  # the old copy is left to eviction


def test_a_shard_replaced_but_not_indexed_again_is_refused_naming_it(
    s3: S3Server, fsspec_io_thread: None, tmp_path: Path
) -> None:
    """A shard rewritten (same size, another ETag), its index left as it was: a fetch of it fails
    naming the shard, both versions and what to do, instead of reading samples the index does not
    describe. (A copy of the version the index names, cached before, is still read: no request.)"""
    prefix = "versions/stale-index"
    urls = _put_indexed(s3, prefix, 0, 0)
    Storage(s3.storage_options).write(urls[0], tar_bytes(id_samples(100, 5)))
    config = _config(s3.url(f"{prefix}/"), tmp_path / "cache", storage_options=s3.storage_options)
    changed = rf"{urls[0]}: the store holds \d+ bytes \(etag:\w+\) where the index says \d+ \(etag:\w+\)"
    with pytest.raises(ShardChangedError, match=rf"{changed}; the shard changed .*: index it again"):
        _ids(config)


def test_a_shard_replaced_after_the_listing_is_refused_not_checked_against_the_listing(
    s3: S3Server, fsspec_io_thread: None, tmp_path: Path
) -> None:
    """A shard rewritten after the start listed the prefix (same size, another ETag): the check
    before its fetch asks the store now, not the listing s3fs keeps, and refuses it."""
    prefix = "versions/after-listing"
    urls = _put_indexed(s3, prefix, 0, 0)
    config = _config(s3.url(f"{prefix}/"), tmp_path / "cache", storage_options=s3.storage_options)
    changed = rf"{urls[0]}: the store holds \d+ bytes \(etag:\w+\) where the index says \d+ \(etag:\w+\)"
    with loaderfactory.build_loader(config) as loader:  # the prefix listed here
        replaced = tar_bytes([{**sample, "txt": b""} for sample in id_samples(100, 5)])
        Storage(s3.storage_options).write(urls[0], replaced)
        with pytest.raises(ShardChangedError, match=changed):
            [int(i) for batch in loader for i in batch["cls"]]


def test_shards_copied_with_their_index_to_another_store_are_refused_saying_to_index_the_copy(
    fsspec_io_thread: None, tmp_path: Path
) -> None:
    """Shards indexed over HTTP, then copied with their index to another folder (same bytes, other
    modification times, as ``cp`` without ``-p`` or a mirror gives): the copy's tags cannot be
    trusted to name the indexed version, so it is refused, the error saying it may be a copy and
    that indexing it fixes that."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    paths = write_tar_shards(original, [5, 5])
    with serving(original) as (base, _):
        urls = [f"{base}/{Path(path).name}" for path in paths]
        entries = build_index(urls, Storage(), progress=False)
    local = [dataclasses.replace(info, url=path) for info, path in zip(entries, paths, strict=True)]
    save_index(local, str(original / "loaderfactory-shards.json"), Storage())
    shutil.copytree(original, copy, copy_function=shutil.copyfile)
    for path in copy.glob("*.tar"):
        later = path.stat().st_mtime + 3600  # Last-Modified counts seconds: an hour apart, for sure
        os.utime(path, (later, later))
    with serving(copy) as (base, _):
        config = _config(f"{base}/train-{{000000..000001}}.tar", tmp_path / "cache")
        copied = r"or was copied from another store.*index the copy \(run\.mode=index\)"
        with pytest.raises(ShardChangedError, match=rf"{base}/train-000000.tar: .*changed since .*{copied}"):
            _ids(config)


def test_copies_named_by_their_url_alone_are_evicted_at_start_unless_held(
    tmp_path: Path, fsspec_io_thread: None
) -> None:
    """Copies named as before version tags (``<16 hex digits of sha1(url)>.<name>``) are never
    reused: the start evicts those of its shards that no process holds, with their lock files,
    and leaves a held one and every other file alone."""
    paths = write_indexed_tar_shards(tmp_path / "data", [5, 5])
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    with serving(tmp_path / "data") as (base, _):
        urls = [f"{base}/{Path(path).name}" for path in paths]
        old = [cache_dir / f"{hashlib.sha1(url.encode()).hexdigest()[:16]}.{Path(url).name}" for url in urls]
        for copy, path in zip(old, paths, strict=True):
            shutil.copyfile(path, copy)
            (cache_dir / f".{copy.name}.lock").touch()
        other = cache_dir / "0123456789abcdef.train-000000.tar"  # of another URL: not this start's
        shutil.copyfile(paths[0], other)
        held = os.open(old[1], os.O_RDONLY)
        try:
            fcntl.flock(held, fcntl.LOCK_SH)  # open in a process of the earlier version
            assert _ids(_config(f"{base}/train-{{000000..000001}}.tar", cache_dir)) == Counter(range(10))
        finally:
            os.close(held)
    assert not old[0].exists() and not (cache_dir / f".{old[0].name}.lock").exists()
    assert old[1].exists() and other.exists()


class ShortBodyHandler(CountingRangeHandler):
    """Answers a range of a ``.tar`` with its first two thirds, Content-Length and Content-Range saying
    so (a well-formed but short answer, as a proxy may give), while ``state["short"]`` is true."""

    state: dict[str, bool]

    def do_GET(self) -> None:
        path = Path(self.translate_path(self.path))
        wanted = self.headers.get("Range", "")
        if not (self.state["short"] and path.suffix == ".tar" and wanted.startswith("bytes=")):
            super().do_GET()
            return
        data = path.read_bytes()
        start, _, end = wanted.removeprefix("bytes=").partition("-")
        first, last = int(start), min(int(end or len(data) - 1), len(data) - 1)
        body = data[first : first + (last - first + 1) * 2 // 3]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{first + len(body) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def short_server(tmp_path: Path, fsspec_io_thread: None) -> Iterator[tuple[str, dict[str, bool]]]:
    """Three indexed tar shards (ids 0..8) served over HTTP; the answers are short while ``short``."""
    write_indexed_tar_shards(tmp_path / "data", [3, 3, 3])
    state = {"short": True}
    with serving(tmp_path / "data", ShortBodyHandler, state=state) as (base, _):
        yield base, state


def test_a_short_answer_is_never_cached_and_is_named_a_server_fault(
    short_server: tuple[str, dict[str, bool]], tmp_path: Path
) -> None:
    """A server sending two thirds of a shard (with a matching Content-Length) fails the read with a
    StorageError naming the URL and the server; nothing is kept under the shard's name, so the run
    after the server is fixed reads every id once."""
    base, state = short_server
    cache_dir = tmp_path / "cache"
    config = _config(f"{base}/train-{{000000..000002}}.tar", cache_dir)
    url = f"{base}/train-000000.tar"
    with pytest.raises(
        StorageError, match=rf"{url}: the server sent \d+ bytes of the \d+.*server or the network"
    ):
        _ids(config)
    assert [name for name in cache_dir.iterdir() if name.name.endswith(".tar")] == []
    state["short"] = False
    assert _ids(config) == Counter(range(9))


class ReplacedOnGetHandler(CountingRangeHandler):
    """While ``state["replaced"]``, GETs of a ``.tar`` answer from the same name in ``replacement``
    (a larger object), HEADs still from the served folder: a shard replaced between the version
    check before a fetch and the fetch itself."""

    state: dict[str, bool]
    replacement: Path

    def translate_path(self, path: str) -> str:
        served = super().translate_path(path)
        if self.command == "GET" and self.state["replaced"] and served.endswith(".tar"):
            return str(self.replacement / Path(served).name)
        return served


def test_a_shard_replaced_during_its_fetch_is_a_storage_error_and_never_cached(
    tmp_path: Path, fsspec_io_thread: None
) -> None:
    """The ranged GET's ``Content-Range`` tells the object's whole size: one other than the size
    the version check found fails the fetch naming the shard, and nothing is kept under its name."""
    write_indexed_tar_shards(tmp_path / "data", [5, 5])
    replacement = tmp_path / "replacement"
    replacement.mkdir()
    padded = [{**sample, "txt": b"x" * 600} for sample in id_samples(100, 5)]
    (replacement / "train-000000.tar").write_bytes(tar_bytes(padded))
    state = {"replaced": True}
    cache_dir = tmp_path / "cache"
    with serving(tmp_path / "data", ReplacedOnGetHandler, state=state, replacement=replacement) as (base, _):
        config = _config(f"{base}/train-{{000000..000001}}.tar", cache_dir)
        url = f"{base}/train-000000.tar"
        with pytest.raises(StorageError, match=rf"{url}: .* \d+ bytes where \d+ .*changed during the fetch"):
            _ids(config)
        assert list(cache_dir.glob("*.train-000000.tar")) == []
        state["replaced"] = False
        assert _ids(config) == Counter(range(10))


def _put(s3: S3Server, prefix: str, counts: list[int]) -> list[str]:
    storage, urls, first = Storage(s3.storage_options), [], 0
    for number, count in enumerate(counts):
        urls.append(s3.url(f"{prefix}/train-{number:06d}.tar"))
        storage.write(urls[-1], tar_bytes(id_samples(first, count)))
        first += count
    save_index(build_index(urls, storage, progress=False), index_url(urls), storage)
    return urls


@pytest.mark.parametrize(("how", "workers"), [("removed", 0), ("replaced by a file", 0), ("removed", 2)])
def test_a_cache_dir_gone_mid_epoch_is_a_cache_error_naming_it(
    s3: S3Server, fsspec_io_thread: None, tmp_path: Path, how: str, workers: int
) -> None:
    """cache.dir removed (or replaced by a file) after the first batch (with workers: before their
    first read): the read of the next shard fails with a CacheError, in the loop, naming the folder,
    the shard's URL, the sample and what to do."""
    prefix = f"versions/gone-{how.replace(' ', '-')}-{workers}"
    urls = _put(s3, prefix, [2, 2])
    cache_dir = tmp_path / "cache"
    config = _config(s3.url(f"{prefix}/"), cache_dir, open_shards=1, storage_options=s3.storage_options)
    config["loader"]["num_workers"] = workers
    first = 2 if workers == 0 else 0
    with loaderfactory.build_loader(config) as loader:
        if workers == 0:
            batches = iter(loader)
            assert [int(i) for i in next(batches)["cls"]] == [0, 1]
        shutil.rmtree(cache_dir)
        if how != "removed":
            cache_dir.write_text("")
        with pytest.raises(CacheError) as caught:
            next(batches if workers == 0 else iter(loader))
    message = str(caught.value)
    assert f"cache.dir '{cache_dir}': cannot keep {urls[first // 2]} there" in message
    assert "make it a writable folder again, or set cache.dir to another one" in message
    assert f"sample #0 of the shard (#{first} overall)" in message
