"""Shard URL expansion: lists, brace patterns, folders and prefixes, local globs; a listing that
lacks a shard its index lists is refused."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from s3_server import S3Server
from shards_data import id_samples, tar_bytes, write_tar_shards

import loaderfactory
from loaderfactory.errors import ConfigError
from loaderfactory.shards import (
    INDEX_NAME,
    ShardNotFoundError,
    ShardsDataset,
    Storage,
    build_index,
    expand_braces,
    expand_urls,
    save_index,
)
from loaderfactory.shards.storage.urls import listed_by


@given(first=st.integers(0, 500), count=st.integers(1, 40), width=st.integers(1, 6))
def test_a_zero_padded_range_names_every_number_once_at_its_width(first: int, count: int, width: int) -> None:
    """``{0007..0012}`` stands for each number of the range, in order, padded to the first bound's width."""
    last = first + count - 1
    width = max(width, len(str(last)))
    pattern = f"s3://b/train-{first:0{width}d}..{last:0{width}d}.tar".replace("-", "-{", 1).replace(
        ".tar", "}.tar"
    )
    urls = expand_braces(pattern)
    assert urls == [f"s3://b/train-{n:0{width}d}.tar" for n in range(first, last + 1)]


@given(st.lists(st.text("abcxyz0123", min_size=1, max_size=4), min_size=2, max_size=5, unique=True))
def test_alternatives_multiply_with_other_braces(names: list[str]) -> None:
    """``{a,b}-{0..1}`` is the product of its braces, the first brace varying slowest."""
    urls = expand_braces(f"data/{{{','.join(names)}}}-{{0..1}}.tar")
    assert urls == [f"data/{name}-{n}.tar" for name in names for n in (0, 1)]


def test_unpadded_ranges_and_plain_urls() -> None:
    """``{8..10}`` is not padded; a URL without braces stands for itself."""
    assert expand_braces("x{8..10}.tar") == ["x8.tar", "x9.tar", "x10.tar"]
    assert expand_urls(["a.tar", "s3://b/c-{0..1}.parquet"]) == [
        "a.tar",
        "s3://b/c-0.parquet",
        "s3://b/c-1.parquet",
    ]


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("t-{5..2}.tar", r"t-\{5..2\}.tar: range \{5..2\} counts down; write \{2..5\}"),
        ("t-{a}.tar", r"neither a range like \{000..127\} nor alternatives"),
        ("t-{{0..1}}.tar", "unbalanced or nested braces"),
    ],
)
def test_a_bad_pattern_is_named_with_a_fix(pattern: str, message: str) -> None:
    """A brace the expander cannot read is reported with the pattern and what to write instead."""
    with pytest.raises(ValueError, match=message):
        expand_braces(pattern)


def test_a_folder_stands_for_its_shards_sorted(tmp_path: Path) -> None:
    """A local folder (or ``file://`` folder) gives its ``.tar``/``.parquet`` files, sorted, nothing else."""
    for name in ["b.tar", "a.parquet", "sub/c.tar", "notes.txt", "loaderfactory-shards.json"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    expected = [str(tmp_path / n) for n in ["a.parquet", "b.tar", "sub/c.tar"]]
    assert expand_urls(str(tmp_path)) == expected
    assert expand_urls(f"file://{tmp_path}/") == [f"file://{p}" for p in expected]


def test_a_glob_stands_for_its_matches_sorted(tmp_path: Path) -> None:
    """A local glob gives its matches in sorted order; one that matches nothing names itself."""
    for name in ["t-2.tar", "t-1.tar", "u-1.tar"]:
        (tmp_path / name).write_bytes(b"")
    assert expand_urls(str(tmp_path / "t-*.tar")) == [str(tmp_path / "t-1.tar"), str(tmp_path / "t-2.tar")]
    with pytest.raises(FileNotFoundError, match=r"v-\*\.tar"):
        expand_urls(str(tmp_path / "v-*.tar"))


def test_a_folder_without_shards_is_an_error_naming_it(tmp_path: Path) -> None:
    """An empty folder is reported with its path instead of giving an empty dataset."""
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}/: no .tar or .parquet shards"):
        expand_urls(f"{tmp_path}/")


COUNTS = [5] * 4
"""Four shards of five samples: ids 0..19, shard ``k`` holding ids ``5k`` to ``5k + 4``."""


def _indexed_folder(folder: Path) -> list[str]:
    """``COUNTS`` shards in ``folder`` and their index beside them."""
    paths = write_tar_shards(folder, COUNTS)
    save_index(build_index(paths, Storage(), progress=False), str(folder / INDEX_NAME), Storage())
    return paths


def _ids(config: dict[str, Any]) -> list[int]:
    with loaderfactory.build_loader(config) as loader:
        return sorted(int(i) for batch in loader for i in batch["cls"])


LISTINGS = {
    "a folder": ("{}/", None, "urls"),
    "a folder without its slash": ("{}", None, "urls"),
    "a file:// folder": ("file://{}/", None, "urls"),
    "a glob": ("{}/*.tar", None, "urls"),
    "a folder and its index named": ("{}/", "{}/" + INDEX_NAME, "index"),
}


@pytest.mark.parametrize("listing", LISTINGS)
def test_a_shard_deleted_after_indexing_is_named_not_left_out(tmp_path: Path, listing: str) -> None:
    """A folder, prefix or glob lists the shards there; a shard its index lists there that is gone
    (deleted after indexing) is refused at start naming its URL and the index, never read as 15 of
    20 samples; the config is named at ``dataset.urls`` (``dataset.index`` when it names the index)."""
    folder = tmp_path / "data"
    gone = _indexed_folder(folder)[1]
    os.remove(gone)
    url_form, index_form, field = LISTINGS[listing]
    urls, index = url_form.format(folder), index_form and index_form.format(folder)
    with pytest.raises(ShardNotFoundError) as raised:
        ShardsDataset(urls, index=index, progress=False)
    assert raised.value.filename.endswith(gone)
    assert re.search(rf"the index (file://)?{folder}/{INDEX_NAME} lists it", str(raised.value))
    config = {"dataset": {"kind": "shards", "urls": urls, "index": index}, "loader": {"kind": "torch"}}
    message = rf"dataset\.{field}: .*no such shard or object.*'(file://)?{re.escape(gone)}'"
    with pytest.raises(ConfigError, match=message):
        loaderfactory.build_loader(config)


def test_a_shard_deleted_while_reading_a_folder_fails_its_read(tmp_path: Path) -> None:
    """Deleted after the loader started (two workers): the samples before it come once each, then
    reading it raises ShardNotFoundError naming it; the epoch does not just shrink."""
    folder = tmp_path / "data"
    gone = write_tar_shards(folder, COUNTS)[1]  # no index: it is built at start, from the listing
    config = {
        "dataset": {"kind": "shards", "urls": f"{folder}/"},
        "loader": {"kind": "torch", "batch_size": 5, "num_workers": 2},
    }
    ids: list[int] = []
    with (
        pytest.raises(ShardNotFoundError, match=re.escape(gone)),
        loaderfactory.build_loader(config) as loader,
    ):
        assert len(loader) == 4
        os.remove(gone)
        for batch in loader:
            ids += batch["cls"].tolist()
    assert ids == list(range(5))


@pytest.mark.parametrize("urls", ["{}/train-00000[023].tar", "{}/train-{{000000,000002,000003}}.tar"])
def test_a_glob_or_braces_naming_fewer_shards_than_the_index_read_them(tmp_path: Path, urls: str) -> None:
    """What names a subset of the index's shards is no deletion: the shards named are read, each
    sample once, whether the one left out is there or not."""
    folder = tmp_path / "data"
    os.remove(_indexed_folder(folder)[1])
    config = {"dataset": {"kind": "shards", "urls": urls.format(folder)}, "loader": {"kind": "torch"}}
    assert _ids(config) == [*range(5), *range(10, 20)]


@pytest.mark.parametrize("index", ["beside the shards", "kept in the cache"])
def test_a_shard_deleted_under_an_s3_prefix_is_named(
    s3: S3Server, tmp_path: Path, fsspec_io_thread: None, index: str
) -> None:
    """An S3 prefix whose index (beside the shards, or the one the cache kept from an earlier start)
    lists a shard deleted since: refused at start naming its URL, not 15 of 20 samples."""
    storage = Storage(s3.storage_options)
    prefix = s3.url(f"listing/{tmp_path.name}/")  # a prefix of its own: the bucket is shared
    urls = [f"{prefix}train-{n:06d}.tar" for n in range(len(COUNTS))]
    for number, url in enumerate(urls):
        storage.write(url, tar_bytes(id_samples(5 * number, 5)))
    dataset: dict[str, Any] = {"kind": "shards", "urls": prefix, "storage_options": s3.storage_options}
    if index == "beside the shards":
        save_index(build_index(urls, storage, progress=False), f"{prefix}{INDEX_NAME}", storage)
    else:
        dataset["cache"] = {"dir": str(tmp_path / "cache")}
    config = {"dataset": dataset, "loader": {"kind": "torch", "batch_size": 5}}
    assert _ids(config) == list(range(20))
    fs, path = storage._remote("s3", urls[1].removeprefix("s3://"))
    fs.rm_file(path)
    with pytest.raises(
        ConfigError, match=rf"dataset\.urls: .*no such shard or object.*'{re.escape(urls[1])}'"
    ):
        loaderfactory.build_loader(config)


def test_what_a_listing_stands_for() -> None:
    """The shards a folder, prefix or glob lists when they are there (what an index beside them may
    not list beyond); URLs and braces name theirs one by one."""
    under = listed_by("s3://b/train/")
    assert under is not None and under("s3://b/train/x/a.parquet") and under("s3://b/train/a.tar")
    assert not under("s3://b/train/notes.txt") and not under("s3://b/other/a.tar")
    matches = listed_by("data/*.tar")
    assert matches is not None and matches("data/t-1.tar")
    assert not matches("data/.t-1.tar") and not matches("data/x/t-1.tar") and not matches("data/t.parquet")
    assert listed_by("data/t-{0..3}.tar") is None and listed_by(["data/t-0.tar", "s3://b/t.tar"]) is None
