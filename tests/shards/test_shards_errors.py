"""The shards' errors end to end (issue "Shards", point 7), through ``build_loader`` and the command:
each reaches the consumer with its own type, naming the URL and the sample; nothing hangs (a test's
timeout is the guard); no partial file is left in the cache; no process or thread is left behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_forks import run_command
from http_server import ShardServer
from shards_data import id_samples, parquet_bytes, tar_bytes, write_tar_shards

import loaderfactory
from loaderfactory.errors import ConfigError
from loaderfactory.shards import (
    INDEX_NAME,
    ShardError,
    ShardNotFoundError,
    Storage,
    StorageError,
    build_index,
    load_index,
    save_index,
)
from loaderfactory.shards.storage import remote_fs

pytestmark = pytest.mark.usefixtures("cli_forks")  # command runs fork from one interpreter

ROOT = Path(__file__).resolve().parents[2]
COUNTS = [4] * 10
"""Ten shards of four samples: a batch of two stays within a shard, and most are read after the first."""
SAMPLE = r"while reading sample #\d+ of the shard \(#\d+ overall\)"


@pytest.fixture
def serve(fsspec_io_thread: None) -> Iterator[Callable[..., ShardServer]]:
    """Starts :class:`ShardServer` s for the test and stops them after it."""
    with ExitStack() as servers:

        def start(folder: Path, broken: tuple[str, ...] = ()) -> ShardServer:
            server = ShardServer(folder, broken)
            servers.callback(server.close)
            return server

        yield start


def _served_shards(
    tmp_path: Path, serve: Callable[..., ShardServer], **kwargs: Any
) -> tuple[ShardServer, list[str]]:
    names = [Path(p).name for p in write_tar_shards(tmp_path / "data", COUNTS)]
    server = serve(tmp_path / "data", **kwargs)
    return server, [f"{server.url}/{name}" for name in names]


def _only_whole_shards_in(cache: Path, data: Path) -> None:
    """Every file of the cache folder is a lock file, the shards' whole index, or a whole copy of a
    shard, nothing partial."""
    for name in os.listdir(cache):
        if name.endswith(".lock"):
            continue
        if re.fullmatch(r"index-[0-9a-f]{16}\.json", name):
            assert len(load_index(str(cache / name), Storage())) == len(COUNTS)
            continue
        cached = re.fullmatch(r"[0-9a-f]{16}\.(train-\d{6}\.tar)", name)
        assert cached, f"{name!r} in the cache folder is no cached shard"
        assert (cache / name).read_bytes() == (data / cached[1]).read_bytes(), f"{name} is partial"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("how", "num_workers", "cached"),
    [("stops", 0, False), ("cuts", 0, True), ("stops", 2, True), ("cuts", 2, False)],
)
def test_a_server_that_goes_away_mid_epoch_fails_naming_url_and_sample(
    tmp_path: Path, serve: Callable[..., ShardServer], how: str, num_workers: int, cached: bool
) -> None:
    """The server stops (or cuts every answer short) after the first batch: once ``retries`` are spent
    the consumer gets StorageError (an OSError) naming a shard's URL and the sample, with or without
    workers and cache; the batches before it were right; the cache holds only whole shards."""
    server, urls = _served_shards(tmp_path, serve)
    dataset: dict[str, Any] = {"kind": "shards", "urls": urls, "retries": 1}
    if cached:
        dataset["cache"] = {"dir": str(tmp_path / "cache")}
    config = {"dataset": dataset, "loader": {"kind": "torch", "batch_size": 2, "num_workers": num_workers}}
    seen: list[int] = []
    with pytest.raises(StorageError) as failed, loaderfactory.build_loader(config) as loader:
        for batch in loader:
            if not seen:
                server.go_away(how)
            seen += [int(i) for i in batch["cls"]]
    assert isinstance(failed.value, OSError)
    message = rf"{re.escape(server.url)}/train-\d{{6}}\.tar: failed after 1 retries .*; {SAMPLE}"
    assert re.search(message, str(failed.value)), str(failed.value)
    assert seen[:2] == [0, 1] and seen == list(range(len(seen))) and len(seen) < sum(COUNTS)
    if cached:
        _only_whole_shards_in(tmp_path / "cache", tmp_path / "data")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("num_workers", "cached"), [(0, False), (2, True)])
def test_a_server_that_stops_answering_fails_after_the_read_timeout(
    tmp_path: Path,
    serve: Callable[..., ShardServer],
    monkeypatch: pytest.MonkeyPatch,
    num_workers: int,
    cached: bool,
) -> None:
    """The server accepts every request after the first batch and never answers: each attempt ends
    at the read timeout (here 0.5 s; aiohttp's own is 5 minutes), and after the retries the consumer
    gets StorageError naming the URL and the sample instead of waiting forever."""
    monkeypatch.setitem(remote_fs.HTTP_TIMEOUTS_S, "sock_read", 0.5)
    server, urls = _served_shards(tmp_path, serve)
    dataset: dict[str, Any] = {"kind": "shards", "urls": urls, "retries": 1}
    if cached:
        dataset["cache"] = {"dir": str(tmp_path / "cache")}
    config = {"dataset": dataset, "loader": {"kind": "torch", "batch_size": 2, "num_workers": num_workers}}
    with pytest.raises(StorageError) as failed, loaderfactory.build_loader(config) as loader:
        for number, _ in enumerate(loader):
            if number == 0:
                server.go_away("hangs")
    message = rf"{re.escape(server.url)}/train-\d{{6}}\.tar: failed after 1 retries \(\w*Timeout.*; {SAMPLE}"
    assert re.search(message, str(failed.value)), str(failed.value)
    if cached:
        _only_whole_shards_in(tmp_path / "cache", tmp_path / "data")


def _command(tmp_path: Path, *overrides: str, sweep: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m loaderfactory [-m] dataset=shards OVERRIDES``: two workers, batches of two, no
    progress bar."""
    command = [*(["-m"] if sweep else []), "dataset=shards", "loader.num_workers=2"]
    command += ["loader.batch_size=2", "run.progress=false", f"hydra.run.dir={tmp_path / 'run'}", *overrides]
    return run_command(tmp_path, *command)


def test_the_command_reports_a_shard_it_cannot_read_in_one_paragraph(
    tmp_path: Path, serve: Callable[..., ShardServer]
) -> None:
    """A shard whose every answer the server cuts short, reached mid-run: after the retries the
    command says which URL and sample in one paragraph, without a traceback, and exits 1."""
    paths = write_tar_shards(tmp_path / "data", COUNTS)
    save_index(build_index(paths, Storage(), progress=False), str(tmp_path / "data" / INDEX_NAME), Storage())
    server = serve(tmp_path / "data", broken=("train-000003.tar",))
    urls = f"{server.url}/train-{{000000..000009}}.tar"
    done = _command(tmp_path, f"dataset.urls='{urls}'", "dataset.retries=1")
    assert done.returncode == 1, done.stderr[-3000:]
    first, message = done.stderr.strip().splitlines()[-2:]
    assert first == "loaderfactory: reading the shards failed (StorageError):"
    assert message.startswith(f"{server.url}/train-000003.tar: failed after 1 retries (ClientPayloadError")
    assert message.endswith("; while reading sample #0 of the shard (#12 overall)")
    assert "Traceback" not in done.stderr


@dataclass(frozen=True)
class Mistake:
    """A shards mistake: ``setup(folder, serve)`` writes the data and returns the dataset's fields;
    ``at`` is the config path a build-time mistake is reported at (None: it fails reading, as
    ``error``); ``message`` the error's text (a regex)."""

    setup: Callable[[Path, Callable[..., ShardServer]], dict[str, Any]]
    message: str
    at: str | None = None
    error: type[Exception] = ShardError


def _indexed_tars(folder: Path, counts: list[int] = COUNTS[:3]) -> list[str]:
    paths = write_tar_shards(folder, counts)
    save_index(build_index(paths, Storage(), progress=False), str(folder / INDEX_NAME), Storage())
    return paths


def _cut_in_half(path: str) -> None:
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])


def _missing(folder: Path, serve: object) -> dict[str, Any]:
    return {"urls": [write_tar_shards(folder, [4])[0], str(folder / "nope.tar")]}


def _gone_after_indexing(folder: Path, serve: object) -> dict[str, Any]:
    os.remove(_indexed_tars(folder)[1])
    return {"urls": f"{folder}/train-{{000000..000002}}.tar"}


def _truncated(folder: Path, serve: object) -> dict[str, Any]:
    _cut_in_half(write_tar_shards(folder, COUNTS[:3])[1])
    return {"urls": f"{folder}/"}


def _truncated_after_indexing(folder: Path, serve: object) -> dict[str, Any]:
    _cut_in_half(_indexed_tars(folder)[1])
    return {"urls": f"{folder}/"}


def _corrupt_parquet(folder: Path, serve: object) -> dict[str, Any]:
    folder.mkdir()
    paths = [str(folder / f"part-{n}.parquet") for n in range(2)]
    for number, path in enumerate(paths):
        Path(path).write_bytes(parquet_bytes(number * 6, 6))
    save_index(build_index(paths, Storage(), progress=False), str(folder / INDEX_NAME), Storage())
    data = Path(paths[1]).read_bytes()
    Path(paths[1]).write_bytes(data[: len(data) // 2] + data[-4:])  # the footer's length, no footer
    return {"urls": f"{folder}/"}


def _without_a_key(folder: Path, serve: object) -> dict[str, Any]:
    folder.mkdir()
    samples = id_samples(0, 8)
    del samples[5]["json"]
    (folder / "holes.tar").write_bytes(tar_bytes(samples))
    return {"urls": f"{folder}/", "keys": ["cls", "json"]}


def _unwritable_cache(folder: Path, serve: object) -> dict[str, Any]:
    paths = write_tar_shards(folder, [4])
    return {"urls": paths, "cache": {"dir": f"{paths[0]}/cache"}}  # a folder inside a file


def _small_cache(folder: Path, serve: Callable[..., ShardServer]) -> dict[str, Any]:
    names = [Path(p).name for p in write_tar_shards(folder, [4, 4])]
    server = serve(folder)
    return {"urls": [f"{server.url}/{n}" for n in names], "cache": {"dir": str(folder / "c"), "limit": 100}}


def _reading(local: int, overall: int) -> str:
    return rf"while reading sample #{local} of the shard \(#{overall} overall\)"


MISTAKES = {
    "a missing shard": Mistake(
        _missing, r"dataset\.urls: .*no such shard or object .*nope\.tar", "dataset.urls"
    ),
    "a shard gone after indexing": Mistake(
        _gone_after_indexing,
        rf"no such shard or object .*; {_reading(0, 4)}: '.*train-000001\.tar'",
        error=ShardNotFoundError,
    ),
    "a truncated tar": Mistake(_truncated, r"dataset: .*train-000001\.tar: truncated tar", "dataset"),
    "a tar truncated after indexing": Mistake(
        _truncated_after_indexing,
        rf"train-000001\.tar: truncated tar: .*; {_reading(0, 4)}",
    ),
    "a corrupt Parquet file": Mistake(
        _corrupt_parquet,
        rf"part-1\.parquet: not a readable Parquet file .*; {_reading(0, 6)}",
    ),
    "a sample missing a key": Mistake(
        _without_a_key, r"holes\.tar: sample 'sample000005' \(#5 in the shard, #5 overall\) has no 'json'"
    ),
    "an unwritable cache folder": Mistake(
        _unwritable_cache,
        r"dataset\.cache\.dir: cache\.dir '.*/cache' is not a writable folder",
        "dataset.cache.dir",
    ),
    "a cache limit below one shard": Mistake(
        _small_cache,
        r"dataset\.cache\.limit: cache\.limit 100 bytes is smaller than the shard http://.*\.tar",
        "dataset.cache.limit",
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", MISTAKES)
def test_each_mistake_is_named_through_build_loader(
    tmp_path: Path, serve: Callable[..., ShardServer], name: str
) -> None:
    """Through ``build_loader`` with two workers: a build-time mistake is a ConfigError at its path;
    a read-time one reaches the consumer with its own type, naming the URL and the sample."""
    mistake = MISTAKES[name]
    dataset = {"kind": "shards", **mistake.setup(tmp_path / "data", serve)}
    config = {"dataset": dataset, "loader": {"kind": "torch", "batch_size": 2, "num_workers": 2}}
    if mistake.at is not None:
        with pytest.raises(ConfigError, match=mistake.message):
            loaderfactory.build_loader(config)
        return
    with pytest.raises(mistake.error, match=mistake.message), loaderfactory.build_loader(config) as loader:
        for _ in loader:
            pass


def _override(field: str, value: Any) -> str:
    """``dataset.FIELD=VALUE`` in Hydra's grammar, strings quoted."""

    def text(item: Any) -> str:
        return f"'{item}'" if isinstance(item, str) else str(item)

    if isinstance(value, list):
        return f"dataset.{field}=[{','.join(map(text, value))}]"
    if isinstance(value, dict):
        return f"dataset.{field}={{{','.join(f'{k}:{text(v)}' for k, v in value.items())}}}"
    return f"dataset.{field}={text(value)}"


@pytest.mark.parametrize("name", MISTAKES)
def test_each_mistake_is_named_by_the_command(
    tmp_path: Path, serve: Callable[..., ShardServer], name: str
) -> None:
    """Through the command: a build-time mistake exits 2 naming its config path; a read-time one exits
    1 with one paragraph naming the URL and the sample; never a traceback."""
    mistake = MISTAKES[name]
    fields = mistake.setup(tmp_path / "data", serve)
    done = _command(tmp_path, *(_override(field, value) for field, value in fields.items()))
    if mistake.at is not None:
        assert done.returncode == 2, done.stderr[-3000:]
        assert "loaderfactory: invalid config" in done.stderr
    else:
        assert done.returncode == 1, done.stderr[-3000:]
        assert f"loaderfactory: reading the shards failed ({mistake.error.__name__}):" in done.stderr
    assert re.search(mistake.message, done.stderr), done.stderr[-3000:]
    assert "Traceback" not in done.stderr


def test_a_sweep_job_that_cannot_read_a_shard_fails_alone(tmp_path: Path) -> None:
    """``-m dataset.keys=[cls],[nope]``: the job whose samples lack a key fails with the read error in
    its summary line, the other job runs; the sweep exits 1 without a traceback."""
    write_tar_shards(tmp_path / "data", COUNTS[:2])
    done = _command(
        tmp_path,
        f"dataset.urls={tmp_path / 'data'}/",
        "dataset.keys=[cls],[nope]",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        sweep=True,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert any(line.startswith("  job 0: ok ") for line in lines), done.stderr[-3000:]
    (failed,) = [line for line in lines if line.startswith("  job 1: FAILED ")]
    assert re.search(r": ShardError: .*train-000000\.tar: sample 'sample000000' .* has no 'nope'", failed)
    report = json.loads((tmp_path / "sweep" / "1" / "report.json").read_text())
    assert report["error"] == "reading the shards failed" and "has no 'nope'" in report["message"]
    assert "Traceback" not in done.stderr
