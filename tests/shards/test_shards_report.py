"""Through the command: the run report's ``shards`` section, and ``run.mode=plan``'s shard figures."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_forks import run_command
from counting_http_server import CountingRangeHandler, serving
from s3_server import S3Server
from shards_data import id_samples, sample_bytes, tar_bytes, write_indexed_tar_shards, write_tar_shards

from loaderfactory.shards import ShardInfo, Storage, build_index, save_index
from loaderfactory.shards.index.shard_index import INDEX_NAME

pytestmark = pytest.mark.usefixtures("cli_forks")  # command runs fork from one interpreter

ROOT = Path(__file__).resolve().parents[2]
COUNTS = [6, 4, 7, 5]
TOTAL = sum(COUNTS)


def _command(
    *overrides: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_command(cwd, "run.progress=false", *overrides, env=env, timeout=180)


def _run(tmp_path: Path, *overrides: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``shards`` section of a run's report.json (the run must succeed)."""
    done = _command(*overrides, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "shard cache hits / fetches / evictions" in done.stdout + done.stderr  # the printed table
    shards: dict[str, Any] = json.loads((tmp_path / "run" / "report.json").read_text())["shards"]
    return shards


def _indexed(folder: Path) -> list[str]:
    return write_indexed_tar_shards(folder, COUNTS)


@pytest.mark.parametrize(("workers", "context"), [(0, "null"), (2, "spawn")])
def test_the_report_counts_the_shards_read(tmp_path: Path, workers: int, context: str) -> None:
    """A run over local shards (in this process, or in 2 spawned workers) reports every shard opened
    and at least every sample's bytes read, counted in the processes that read them; no remote work."""
    urls = _indexed(tmp_path / "data")
    loader = [
        f"loader.num_workers={workers}",
        f"loader.multiprocessing_context={context}",
        "loader.batch_size=2",
    ]
    shards = _run(tmp_path, "dataset=shards", f"dataset.urls={tmp_path / 'data'}/", *loader)
    assert shards["shards_opened"] >= len(COUNTS)
    assert shards["bytes_read_local"] >= sample_bytes(urls)
    assert shards["bytes_read"] == shards["bytes_read_local"]
    assert shards["processes"] == 1 + workers
    assert shards["bytes_read_remote"] == shards["cache_fetches"] == shards["retries"] == 0


def test_a_run_over_another_dataset_has_no_shards_section(tmp_path: Path) -> None:
    """Only a pipeline that reads shards reports them."""
    done = _command(
        "dataset=synthetic", "dataset.length=8", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "shards" not in json.loads((tmp_path / "run" / "report.json").read_text())


class FirstGetFails(CountingRangeHandler):
    """Answers each path's first GET with 503 Service Unavailable, as a struggling server does."""

    failed: set[str]
    lock: threading.Lock

    def do_GET(self) -> None:
        with self.lock:
            first = self.path not in self.failed
            self.failed.add(self.path)
        if first:
            self.send_error(503, "try again")
            return
        super().do_GET()


@pytest.fixture
def flaky_http(tmp_path: Path) -> Iterator[tuple[Path, str, set[str]]]:
    """``tmp_path/served`` over HTTP on a free loopback port, each path failing once; the paths failed."""
    folder, failed = tmp_path / "served", set[str]()
    folder.mkdir()
    with serving(folder, FirstGetFails, failed=failed, lock=threading.Lock()) as (base, _):
        yield folder, base, failed


def test_retries_after_transient_errors_are_counted(
    tmp_path: Path, flaky_http: tuple[Path, str, set[str]]
) -> None:
    """Every object of a server that fails each first GET is read after one retry, in the main process
    (the index) or a worker (the shards), and the report counts each retry."""
    folder, base, failed = flaky_http
    local = _indexed(folder)
    urls = f"dataset.urls='{base}/train-{{000000..000003}}.tar'"
    shards = _run(tmp_path, "dataset=shards", urls, "loader.num_workers=2")
    assert {f"/train-00000{n}.tar" for n in range(4)} | {f"/{INDEX_NAME}"} <= failed
    assert shards["retries"] == len(failed)
    assert shards["bytes_read_remote"] >= sample_bytes(local)
    assert shards["fetch_wait_s"] > 0


def _put_shards(s3: S3Server, prefix: str) -> list[ShardInfo]:
    storage, first = Storage(s3.storage_options), 0
    for number, count in enumerate(COUNTS):
        storage.write(s3.url(f"{prefix}/train-{number:06d}.tar"), tar_bytes(id_samples(first, count)))
        first += count
    shards = build_index(storage.list(s3.url(f"{prefix}/")), storage, progress=False)
    save_index(shards, s3.url(f"{prefix}/{INDEX_NAME}"), storage)
    return shards


def _aws(s3: S3Server) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": s3.endpoint_url,
        "AWS_ACCESS_KEY_ID": s3.key,
        "AWS_SECRET_ACCESS_KEY": s3.secret,
    }


@pytest.mark.slow
def test_a_second_epoch_over_cached_s3_shards_fetches_nothing(
    s3: S3Server, fsspec_io_thread: None, tmp_path: Path
) -> None:
    """Two epochs over S3 shards in 2 workers sharing a cache: each shard is fetched once, every
    other open is a hit (the second epoch's all are), and what was fetched is what came from S3."""
    shards = _put_shards(s3, "report-hits")
    cache = f"dataset.cache={{dir:'{tmp_path / 'cache'}'}}"
    workers = ["loader.num_workers=2", "run.epochs=2", "dataset.open_shards=1"]
    figures = _run(
        tmp_path, "dataset=shards", f"dataset.urls={s3.url('report-hits/')}", cache, *workers, env=_aws(s3)
    )
    assert figures["cache_fetches"] == len(shards)
    assert figures["cache_bytes_fetched"] == sum(info.bytes for info in shards)
    assert figures["cache_hits"] == figures["shards_opened"] - figures["cache_fetches"] >= len(shards)
    assert figures["bytes_read_remote"] >= figures["cache_bytes_fetched"]
    assert figures["cache_evictions"] == 0 and figures["fetch_wait_s"] > 0


@pytest.mark.slow
def test_a_cache_limit_of_one_shard_evicts(s3: S3Server, fsspec_io_thread: None, tmp_path: Path) -> None:
    """A cache that holds one shard evicts the last one before each fetch: every open is a fetch."""
    shards = _put_shards(s3, "report-evict")
    limit = max(info.bytes for info in shards)
    cache = f"dataset.cache={{dir:'{tmp_path / 'cache'}',limit:{limit}}}"
    figures = _run(
        tmp_path,
        "dataset=shards",
        f"dataset.urls={s3.url('report-evict/')}",
        cache,
        "dataset.open_shards=1",
        env=_aws(s3),
    )
    assert figures["cache_fetches"] == figures["shards_opened"] == len(shards)
    assert figures["cache_evictions"] == len(shards) - 1
    assert figures["cache_hits"] == 0


def test_plan_shows_the_shards_from_the_index_alone(tmp_path: Path) -> None:
    """``run.mode=plan`` for rank 1 of 3 gives the shards, their sizes, the samples per rank under the
    configured balance (and the others), the steps and the cache bound, with every shard unreadable."""
    urls = _indexed(tmp_path / "data")
    sizes = [Path(url).stat().st_size for url in urls]
    for url in urls:  # garbage of the same size: a plan that opened a shard would fail
        Path(url).write_bytes(b"\x01" * Path(url).stat().st_size)
    done = _command(
        "run.mode=plan",
        "dataset=shards",
        f"dataset.urls={tmp_path / 'data'}/",
        f"dataset.cache={{dir:'{tmp_path / 'cache'}',limit:{3 * max(sizes)}}}",
        "loader.distributed={rank:1,world_size:3}",
        "loader.balance=drop",
        "loader.batch_size=2",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    largest = urls[sizes.index(max(sizes))]
    assert f"shards: {len(COUNTS)} shard(s), " in out and f"({sum(sizes)} bytes) in all" in out
    assert f"({max(sizes)} bytes) ({largest})" in out
    assert f"index: {tmp_path / 'data'}/{INDEX_NAME}" in out
    per_rank = {"drop": TOTAL // 3, "pad": -(-TOTAL // 3), "uneven": len(range(1, TOTAL, 3))}
    assert (
        f"samples: {TOTAL}; per rank: {per_rank['drop']} (balance drop; pad: {per_rank['pad']}, "
        f"uneven: {per_rank['uneven']}); steps per epoch: {-(-per_rank['drop'] // 2)}"
    ) in out
    assert f"({3 * max(sizes)} bytes): room for 3 of the largest shard" in out


def test_plan_says_when_there_is_no_cache_bound(tmp_path: Path) -> None:
    """Without an index the plan says the shards were indexed now; a cache without limit has no bound."""
    write_tar_shards(tmp_path / "data", COUNTS)
    done = _command(
        "run.mode=plan",
        "dataset=shards",
        f"dataset.urls={tmp_path / 'data'}/",
        f"dataset.cache={{dir:'{tmp_path / 'cache'}'}}",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "index: none beside the shards: built now by reading each (save one: run.mode=index)" in out
    assert f"cache: {tmp_path / 'cache'}, no bound" in out
    assert f"samples: {TOTAL}; per rank: {TOTAL} (balance pad;" in out
