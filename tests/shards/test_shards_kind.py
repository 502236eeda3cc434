"""``dataset: {kind: shards}``: its validation, ``run.mode=index``, and exact resume (moved, on S3)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cli_forks import run_command
from s3_server import S3Server
from shards_data import id_samples, tar_bytes, write_tar_shards

import loaderfactory
from loaderfactory.builders import BuildContext
from loaderfactory.builders import shards as shards_builder
from loaderfactory.config.specs import shards as shards_spec
from loaderfactory.errors import ConfigError, ResumeWarning
from loaderfactory.shards import INDEX_NAME, Storage, load_index

pytestmark = pytest.mark.usefixtures("cli_forks")  # command runs fork from one interpreter

ROOT = Path(__file__).resolve().parents[2]
COUNTS = [6, 9, 4, 7, 5]
TOTAL = sum(COUNTS)


def _validate(**fields: Any) -> Any:
    return loaderfactory.validate({"dataset": {"kind": "shards", **fields}})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"urls": "ftp://host/a.tar"}, "dataset.urls: 'ftp://host/a.tar': unsupported scheme 'ftp'"),
        ({"urls": []}, "dataset.urls: must name at least one shard"),
        (
            {"urls": ["a.tar", "b.parquet"], "format": "tar"},
            "dataset.urls.1: is a parquet shard but format is tar; set format: auto or parquet",
        ),
        (
            {"urls": "a.tar", "shuffle_window": 5, "open_shards": 4},
            "dataset.open_shards: must be ≥ shuffle_window \\(5\\)",
        ),
        (
            {"urls": "a.tar", "predownload": 8, "fetch": "range"},
            "dataset.predownload: fetches shards into the cache, but fetch: range has none",
        ),
        (
            {"urls": "a.tar", "fetch": "range", "cache": {"dir": "/c"}},
            "dataset.cache: holds shards fetched whole, but fetch is range; set fetch: whole or cache: null",
        ),
        (
            {"urls": "a.tar", "cache": {"dir": "/c", "limit": "lots"}},
            "dataset.cache.limit: .*'lots' is not a size",
        ),
        ({"urls": "a.tar", "decode": [".npy"]}, "dataset.decode: write extensions without a dot"),
        ({"urls": "a.tar", "retries": -1}, "dataset.retries"),
    ],
)
def test_mistakes_are_named_at_their_path(fields: dict[str, Any], message: str) -> None:
    """Each mistake is reported at its config path, with the value and what to write instead."""
    with pytest.raises(ConfigError, match=message):
        _validate(**fields)


def test_a_cache_limit_is_a_size_in_bytes() -> None:
    """``cache.limit: 20GiB`` is validated to bytes."""
    spec = _validate(urls="s3://bucket/train/", cache={"dir": "/cache", "limit": "20GiB"})
    assert spec.dataset.cache.limit == 20 * 2**30


@pytest.mark.parametrize(
    ("urls", "absent", "message"),
    [
        ("s3://bucket/train/", "s3fs", 'need s3fs, not installed: pip install "loaderfactory\\[s3\\]"'),
        (
            "gs://bucket/train/",
            "fsspec",
            'gs:// URLs need fsspec and gcsfs, not installed: pip install "loaderfactory\\[gcs\\]"',
        ),
        (
            "https://host/train/",
            "aiohttp",
            'need aiohttp, not installed: pip install "loaderfactory\\[http\\]"',
        ),
        (
            "data/part-0.parquet",
            "pyarrow",
            'Parquet shards need pyarrow: pip install "loaderfactory\\[parquet\\]"',
        ),
    ],
)
def test_missing_optional_packages_are_named_with_the_install_command(
    urls: str, absent: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remote scheme without its extra (``s3``, ``gcs``, ``http``), or Parquet without pyarrow, names
    the install command of that extra."""
    gone = {absent, "gcsfs"} if absent == "fsspec" else {absent}
    monkeypatch.setattr(shards_spec, "_installed", lambda package: package not in gone)
    with pytest.raises(ConfigError, match=message):
        _validate(urls=urls)


def test_validating_imports_neither_torch_nor_fsspec() -> None:
    """Look-only modes stay light: a remote shards config validates without torch or fsspec."""
    code = (
        "import sys, loaderfactory; loaderfactory.validate({'dataset': {'kind': 'shards', "
        "'urls': 's3://b/train/', 'cache': {'dir': '/c', 'limit': '1GiB'}, 'predownload': 4}}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'fsspec', 's3fs')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"


def test_the_cache_arguments_are_passed_only_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder hands ``cache`` and ``predownload`` to the dataset as ``cache_dir``, ``cache_limit``
    and ``predownload``, and leaves them out when unset."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(shards_builder, "ShardsDataset", lambda urls, **kwargs: calls.append(kwargs))
    for cache in (None, {"dir": "/c", "limit": "1KiB"}):
        spec = _validate(urls="a.tar", cache=cache, predownload=3 if cache else 0).dataset
        shards_builder.build_shards(spec, None, BuildContext())
    assert not {"cache_dir", "cache_limit", "predownload"} & set(calls[0])
    assert {k: calls[1][k] for k in ("cache_dir", "cache_limit", "predownload")} == {
        "cache_dir": "/c",
        "cache_limit": 1024,
        "predownload": 3,
    }


def test_a_missing_shard_is_reported_at_dataset_urls(tmp_path: Path) -> None:
    """A shard that is not there is a config problem at ``dataset.urls`` naming it."""
    with pytest.raises(ConfigError, match=r"dataset\.urls: .*nope\.tar"):
        loaderfactory.build_loader({"dataset": {"kind": "shards", "urls": str(tmp_path / "nope.tar")}})


def _command(*overrides: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_command(cwd, *overrides)


def test_index_mode_writes_the_index_beside_the_shards(tmp_path: Path) -> None:
    """``run.mode=index`` reads each shard once, writes ``loaderfactory-shards.json`` beside them and
    says where and how many; a loader then reads the counts from it."""
    write_tar_shards(tmp_path / "data", COUNTS)
    done = _command("run.mode=index", "dataset=shards", f"dataset.urls={tmp_path / 'data'}/", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    where = tmp_path / "data" / INDEX_NAME
    assert f"wrote {where}: 5 shard(s), {TOTAL} sample(s)" in done.stdout + done.stderr
    assert "indexing shards" in done.stderr  # the progress bar
    assert [info.samples for info in load_index(str(where), Storage())] == COUNTS


def test_index_mode_needs_the_shards_kind(tmp_path: Path) -> None:
    """``run.mode=index`` with another dataset kind is refused, naming what to set."""
    done = _command("run.mode=index", "dataset=synthetic", cwd=tmp_path)
    assert done.returncode == 2
    assert "run.mode: run.mode=index indexes shards: set dataset=shards dataset.urls=..." in done.stderr


def _config(urls: Any, num_workers: int, **dataset: Any) -> dict[str, Any]:
    shards = {"kind": "shards", "urls": urls, "shuffle_window": 3, "open_shards": 3, **dataset}
    loader = {"kind": "torch", "batch_size": 4, "shuffle": True, "num_workers": num_workers}
    return {"dataset": shards, "loader": loader, "seed": 3}


def _ids(batches: Any) -> list[int]:
    return [int(i) for batch in batches for i in batch["cls"]]


def _save_mid_epoch(config: dict[str, Any], steps: int) -> tuple[list[int], list[int], dict[str, Any]]:
    """(the whole epoch, the ids of its first ``steps`` batches, the state after them)."""
    with loaderfactory.build_loader(config) as whole:
        epoch = _ids(whole)
    with loaderfactory.build_loader(config) as loader:
        before: list[int] = []
        for number, batch in enumerate(loader, start=1):
            before += _ids([batch])
            if number == steps:
                break
        return epoch, before, json.loads(json.dumps(loader.state_dict()))


@pytest.mark.parametrize(("saved_with", "loaded_with"), [(0, 0), (2, 2), (2, 0)])
def test_resume_mid_epoch_delivers_exactly_the_rest(
    tmp_path: Path, saved_with: int, loaded_with: int
) -> None:
    """Saved after 3 batches of a windowed shuffle (with 0 or 2 workers), a fresh loader (with as
    many workers or none) delivers the rest of that epoch: before + after is the epoch, each id once."""
    urls = f"{tmp_path}/train-{{000000..000004}}.tar"
    write_tar_shards(tmp_path, COUNTS)
    epoch, before, state = _save_mid_epoch(_config(urls, saved_with), steps=3)
    assert epoch != sorted(epoch)
    with loaderfactory.build_loader(_config(urls, loaded_with)) as resumed:
        resumed.load_state_dict(state)
        after = _ids(resumed)
    assert before + after == epoch
    assert Counter(before + after) == Counter(range(TOTAL))


def test_moved_shards_resume_with_a_warning_naming_both_places(tmp_path: Path) -> None:
    """The shards moved to another folder (their index with them): the resume is reported, not refused."""
    old, new = tmp_path / "old", tmp_path / "new"
    write_tar_shards(old, COUNTS)
    epoch, before, state = _save_mid_epoch(_config(f"{old}/", 0), steps=2)
    shutil.move(old, new)
    with loaderfactory.build_loader(_config(f"{new}/", 0)) as resumed:
        with pytest.warns(ResumeWarning, match=re.escape(f"dataset.urls: saved {str(old) + '/'!r}")):
            resumed.load_state_dict(state)
        after = _ids(resumed)
    assert before + after == epoch


@pytest.mark.slow
def test_s3_shards_index_and_resume_exactly(s3: S3Server, fsspec_io_thread: None, tmp_path: Path) -> None:
    """Shards in a real S3 bucket: indexed by ``run.mode=index``'s job, then a resume mid-epoch through
    2 workers delivers each remaining id once."""
    storage, first = Storage(s3.storage_options), 0
    for number, count in enumerate(COUNTS):
        storage.write(s3.url(f"kind/train-{number:06d}.tar"), tar_bytes(id_samples(first, count)))
        first += count
    spec = _validate(urls=s3.url("kind/"), storage_options=s3.storage_options).dataset
    where, shards = shards_builder.index_shards(spec, progress=False)
    assert where == s3.url(f"kind/{INDEX_NAME}") and [s.samples for s in shards] == COUNTS
    config = _config(s3.url("kind/"), 2, storage_options=s3.storage_options)
    epoch, before, state = _save_mid_epoch(config, steps=4)
    with loaderfactory.build_loader(config) as resumed:
        resumed.load_state_dict(state)
        after = _ids(resumed)
    assert before + after == epoch and Counter(epoch) == Counter(range(TOTAL))


def test_format_reads_shards_named_otherwise(tmp_path: Path) -> None:
    """``format: tar`` reads tar shards whose names do not end in ``.tar``; ``auto`` says it cannot tell."""
    urls = []
    for number, path in enumerate(write_tar_shards(tmp_path, COUNTS[:2])):
        urls.append(str(Path(path).rename(tmp_path / f"shard-{number}.data")))
    config = {"dataset": {"kind": "shards", "urls": urls, "format": "tar"}, "loader": {"kind": "torch"}}
    with loaderfactory.build_loader(config) as loader:
        assert sorted(_ids(loader)) == list(range(sum(COUNTS[:2])))
    config["dataset"]["format"] = "auto"
    with pytest.raises(ConfigError, match=r"dataset: .*shard-0\.data: unknown shard format"):
        loaderfactory.build_loader(config)
