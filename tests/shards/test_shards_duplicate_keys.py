"""A tar member repeating a field of the sample before it (the same key twice in a row) is refused by
every header walk and every read path, naming the shard, the key and the member, as webdataset's
"duplicate file name"; never merged into one sample (which lost the first one's values).

Such a tar comes from a writer that gave two samples one key (``1.cls`` written for two different
items, as a key taken from a label or a file stem that repeats does), or that wrote a field twice.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_server import ShardServer
from shards_data import write_tar_shards

import loaderfactory
from loaderfactory.errors import ConfigError
from loaderfactory.shards import INDEX_NAME, ShardError, ShardInfo, Storage, save_index
from loaderfactory.shards.formats.tar.shard import scan_tar

KEYS = ["0", "1", "1", "2", "3"]
"""Five items, the second and third given one key: five members ``<key>.cls`` holding 0..4."""
REFUSED = (
    r"train-dup\.tar( \(cached as .*\))?: member '(.*/)?1\.cls' repeats field 'cls' of sample "
    r"'(.*/)?1': .*duplicate file name"
)


def _tar(
    keys: list[str],
    fields: tuple[str, ...] = ("cls",),
    tar_format: int = tarfile.USTAR_FORMAT,
    folder: str = "",
    padding: int = 0,
) -> bytes:
    """Members ``<folder><key>.<field>`` for each key in turn, holding the item's number (and
    ``padding`` spaces: members large enough for the strided walk); pax headers in PAX_FORMAT."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tar_format) as archive:
        for number, key in enumerate(keys):
            for field in fields:
                data = str(number).encode() + b" " * padding
                info = tarfile.TarInfo(f"{folder}{key}.{field}")
                info.size = len(data)
                if tar_format == tarfile.PAX_FORMAT:
                    info.pax_headers = {"comment": "written with a pax header"}
                archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


WRITTEN = {
    "plain, small members (every page at once)": {},
    "plain, large members (guessed places)": {"padding": 20_000},
    "two fields a sample (one pattern)": {"fields": ("cls", "txt")},
    "a ustar name prefix (one header at a time)": {"folder": "p" * 120 + "/"},
    "pax headers (tarfile)": {"tar_format": tarfile.PAX_FORMAT},
}


@pytest.mark.parametrize("how", WRITTEN)
def test_every_header_walk_refuses_a_repeated_field(tmp_path: Path, how: str) -> None:
    """Each way a tar can be walked (numpy over all pages, guessed places, one header at a time,
    tarfile) refuses the shard when it is opened, naming it, the key and the member."""
    path = tmp_path / "train-dup.tar"
    path.write_bytes(_tar(KEYS, **WRITTEN[how]))  # type: ignore[arg-type]
    with pytest.raises(ShardError, match=REFUSED):
        scan_tar(Storage(), str(path))


@pytest.mark.parametrize("how", WRITTEN)
def test_a_key_repeated_later_or_fields_differing_are_still_samples(tmp_path: Path, how: str) -> None:
    """What is no repeat stays readable: a key used again after another one (two samples, as in
    webdataset), and samples with different fields."""
    path = tmp_path / "ok.tar"
    path.write_bytes(_tar(["0", "1", "0", "2"], **WRITTEN[how]))  # type: ignore[arg-type]
    assert len(scan_tar(Storage(), str(path))) == 4


def _folder_with_duplicates(folder: Path, indexed: bool) -> str:
    """A good shard of samples 0..3 and ``train-dup.tar``; with ``indexed``, an index as the reader wrote
    before (4 samples in ``train-dup.tar``, the repeated key merged), so the shard is refused at read time."""
    good = write_tar_shards(folder, [4])[0]
    (folder / "train-dup.tar").write_bytes(_tar(KEYS))
    if indexed:
        shards = [ShardInfo(good, "tar", 4, Path(good).stat().st_size)]
        shards.append(
            ShardInfo(str(folder / "train-dup.tar"), "tar", 4, (folder / "train-dup.tar").stat().st_size)
        )
        save_index(shards, str(folder / INDEX_NAME), Storage())
    return f"{folder}/"


def test_indexing_a_folder_refuses_the_shard(tmp_path: Path) -> None:
    """Through ``build_loader``, no index: indexing the folder at start refuses ``train-dup.tar``."""
    urls = _folder_with_duplicates(tmp_path / "data", indexed=False)
    config = {"dataset": {"kind": "shards", "urls": urls}, "loader": {"kind": "torch", "batch_size": 2}}
    with pytest.raises(ConfigError, match=rf"dataset: .*{REFUSED}"):
        loaderfactory.build_loader(config)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_reading_an_indexed_shard_refuses_it(tmp_path: Path, num_workers: int) -> None:
    """Through ``build_loader``, with an index that counts the merged sample: every sample of the
    good shard comes (ids 0..3, once each), then reading ``train-dup.tar`` raises, never a merged sample."""
    urls = _folder_with_duplicates(tmp_path / "data", indexed=True)
    loader_spec = {"kind": "torch", "batch_size": 4, "num_workers": num_workers}
    config = {"dataset": {"kind": "shards", "urls": urls}, "loader": loader_spec}
    ids: list[int] = []
    with pytest.raises(ShardError, match=REFUSED), loaderfactory.build_loader(config) as loader:
        for batch in loader:
            ids += batch["cls"].tolist()
    assert ids == [0, 1, 2, 3]


@pytest.fixture
def served(tmp_path: Path, fsspec_io_thread: None) -> Iterator[str]:
    """The folder of :func:`_folder_with_duplicates` (indexed) served over HTTP: its URL."""
    _folder_with_duplicates(tmp_path / "data", indexed=True)
    server = ShardServer(tmp_path / "data")
    try:
        yield server.url
    finally:
        server.close()


@pytest.mark.parametrize("fetch", ["whole", "range"])
def test_a_remote_shard_is_refused_cached_or_by_ranges(tmp_path: Path, served: str, fetch: str) -> None:
    """Remote, fetched whole into the cache or read by byte ranges: the error names the URL."""
    urls = [f"{served}/train-000000.tar", f"{served}/train-dup.tar"]
    dataset = {"kind": "shards", "urls": urls, "index": f"{served}/{INDEX_NAME}", "fetch": fetch}
    if fetch == "whole":
        dataset["cache"] = {"dir": str(tmp_path / "cache")}
    config = {"dataset": dataset, "loader": {"kind": "torch", "batch_size": 4}}
    ids: list[int] = []
    message = rf"{served}/{REFUSED}"
    with pytest.raises(ShardError, match=message), loaderfactory.build_loader(config) as loader:
        for batch in loader:
            ids += batch["cls"].tolist()
    assert ids == [0, 1, 2, 3]
