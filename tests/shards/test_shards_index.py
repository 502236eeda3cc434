"""The shards index: built by reading each shard once, saved beside the shards, read back and checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shards_data import write_parquet_shards, write_tar_shards

from loaderfactory.shards import (
    INDEX_FORMAT,
    ShardError,
    ShardInfo,
    Storage,
    build_index,
    find_index,
    index_url,
    load_index,
    save_index,
)


def test_an_index_counts_samples_and_bytes_and_round_trips(tmp_path: Path) -> None:
    """Counts come from the shards; saved beside them with relative URLs; loaded back equal."""
    urls = write_tar_shards(tmp_path / "d", [3, 5]) + write_parquet_shards(tmp_path / "d", [6])
    storage = Storage()
    shards = build_index(urls, storage, progress=False)
    assert [(s.format, s.samples) for s in shards] == [("tar", 3), ("tar", 5), ("parquet", 6)]
    assert [s.bytes for s in shards] == [Path(u).stat().st_size for u in urls]
    where = index_url(urls)
    assert where == f"{tmp_path}/d/loaderfactory-shards.json"
    save_index(shards, where, storage)
    saved = json.loads(Path(where).read_text())
    assert saved["format"] == INDEX_FORMAT and saved["shards"][0]["url"] == "train-000000.tar"
    assert load_index(where, storage) == shards
    assert find_index(urls[1:], storage) == shards[1:]


def test_find_index_is_none_without_one_or_when_it_lacks_a_shard(tmp_path: Path) -> None:
    """No index file, or one that does not list every shard asked for, is no index."""
    urls = write_tar_shards(tmp_path, [2, 2])
    storage = Storage()
    assert find_index(urls, storage) is None
    save_index(build_index(urls[:1], storage, progress=False), index_url(urls), storage)
    assert find_index(urls, storage) is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"format": "other/2", "shards": []}',
            r"index format 'other/2' is not 'loaderfactory.shards-index/1'",
        ),
        ("[1", "not a JSON shards index"),
        (
            json.dumps(
                {"format": INDEX_FORMAT, "shards": [{"url": "a.tar", "format": "tar", "samples": "3"}]}
            ),
            r"shards\[0\] = .* needs url, format \(str\), samples and bytes \(int\)",
        ),
        (
            json.dumps(
                {
                    "format": INDEX_FORMAT,
                    "shards": [{"url": "a.zip", "format": "zip", "samples": 1, "bytes": 1}],
                }
            ),
            r"shards\[0\] = .*: format tar\|parquet",
        ),
    ],
)
def test_a_bad_index_is_refused_naming_file_and_entry(tmp_path: Path, content: str, message: str) -> None:
    """A foreign, broken or ill-typed index says which file and which entry to fix."""
    path = tmp_path / "loaderfactory-shards.json"
    path.write_text(content)
    with pytest.raises(ShardError, match=f"{path}: {message}"):
        load_index(str(path), Storage())


def test_index_entries_outside_the_folder_keep_their_url(tmp_path: Path) -> None:
    """A shard that is not under the index's folder is stored with its full URL."""
    info = ShardInfo("s3://elsewhere/x.tar", "tar", 1, 10)
    where = str(tmp_path / "i.json")
    save_index([info], where, Storage())
    assert load_index(where, Storage()) == [info]


@pytest.mark.parametrize("progress", [True, False])
def test_indexing_at_build_shows_a_progress_bar_as_run_progress_says(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], progress: bool
) -> None:
    """Shards without an index are read once while the loader is built: with a progress bar on
    stderr unless ``run.progress`` is false."""
    import loaderfactory

    write_tar_shards(tmp_path, [2, 3])
    config = {
        "dataset": {"kind": "shards", "urls": f"{tmp_path}/"},
        "loader": {"kind": "torch", "batch_size": 5},
        "run": {"progress": progress},
    }
    loader = loaderfactory.build_loader(config)
    assert len(loader.dataset) == 5
    assert ("indexing shards" in capfd.readouterr().err) == progress
    loader.close()
