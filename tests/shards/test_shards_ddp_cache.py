"""The shards cache across real gloo process groups: two ranks on one machine share one ``cache.dir``
over ``http://`` shards and fetch each shard once between them, a ``cache.limit`` of two shards evicts
yet every id still arrives once, rank 0 alone builds a missing index, and ``balance: uneven`` gives
ranks ``len()`` one apart.

Each test reads what ``tests/support/shards_ddp_cache_scenarios.py`` recorded under one torchrun of 2 ranks
(a module fixture: starting a process group costs seconds), and the log of every request that the
loopback server, started here, answered. Building a loader makes no remote read but the index's (or
rank 0's header walk when there is no index), and the epochs read cached copies locally, so a shard
GET after building is a fetch into the cache, the whole shard in one range.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from counting_http_server import CountingRangeHandler, serving
from shards_data import write_tar_shards

from loaderfactory.shards import INDEX_NAME, Storage, build_index, index_url, save_index

ROOT = Path(__file__).resolve().parents[2]
COUNTS = [9, 4, 11, 7, 6, 10, 6]
"""53 samples in 7 uneven shards: 2 ranks divide neither."""
TOTAL = sum(COUNTS)
SHARD_NAMES = [f"train-{number:06d}.tar" for number in range(len(COUNTS))]
INDEXED = ("w0", "w2", "limited")
"""The served folders with their index beside the shards; ``unindexed`` has none."""
MARK = "/__mark__/"
"""What ``tests/support/shards_ddp_cache_scenarios.py`` GETs once every rank has built its loader."""
Request = tuple[str, str, str]
"""``(method, path, Range header)``, or ``("MARK", folder, "")``."""


class RequestLog(CountingRangeHandler):
    """Logs each request as it arrives (before answering it: a rank that has its answer finds it
    logged), and answers the scenario's marks."""

    requests: list[Request]

    def do_GET(self) -> None:
        if self.path.startswith(MARK):
            self._log("MARK", self.path.removeprefix(MARK))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._log("GET", self.path, self.headers.get("Range", ""))
        super().do_GET()

    def do_HEAD(self) -> None:
        self._log("HEAD", self.path)
        super().do_HEAD()

    def _log(self, method: str, path: str, ranged: str = "") -> None:
        with self.served_lock:
            self.requests.append((method, path, ranged))


@dataclass
class Run:
    records: dict[str, list[dict[str, Any]]]
    """Each scenario's records, one per rank."""
    requests: list[Request]
    data: Path
    cache: Path
    limit: int


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Every scenario in one torchrun of 2 ranks, against a loopback server of ``data``."""
    root = tmp_path_factory.mktemp("cache-ddp")
    data, cache, out = root / "served", root / "cache", root / "out"
    out.mkdir()
    for folder in (*INDEXED, "unindexed"):
        paths = write_tar_shards(data / folder, COUNTS)
        if folder in INDEXED:
            save_index(build_index(paths, Storage(), progress=False), index_url(paths), Storage())
    limit = 2 * max(os.path.getsize(data / "w0" / name) for name in SHARD_NAMES)
    requests: list[Request] = []
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    with serving(data, RequestLog, requests=requests) as (url, _):
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            str(ROOT / "tests/support/shards_ddp_cache_scenarios.py"), str(out), url, str(data), str(cache),
            f"--limit={limit}",
        ]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = {
        scenario: [json.loads((out / f"{scenario}-rank{rank}.json").read_text()) for rank in (0, 1)]
        for scenario in ("cached", "limited", "unindexed", "uneven")
    }
    return Run(records, requests, data, cache, limit)


def _phases(run: Run, folder: str) -> tuple[list[Request], list[Request]]:
    """The requests for ``folder``'s files before its mark (building) and after it (the epochs)."""
    mark = run.requests.index(("MARK", folder, ""))
    mine = [(at, request) for at, request in enumerate(run.requests) if request[1].startswith(f"/{folder}/")]
    return [r for at, r in mine if at < mark], [r for at, r in mine if at > mark]


def _whole_gets(run: Run, folder: str, requests: list[Request]) -> Counter[str]:
    """Shard name → GETs of the whole shard among ``requests``; fails on a GET of part of one."""
    whole: Counter[str] = Counter()
    for method, path, ranged in requests:
        if method != "GET":
            continue
        name = path.removeprefix(f"/{folder}/")
        size = os.path.getsize(run.data / folder / name)
        assert ranged in ("", f"bytes=0-{size - 1}"), f"a GET of part of {path}: {ranged}"
        whole[name] += 1
    return whole


def _each_epoch_once(records: list[dict[str, Any]]) -> None:
    """Over both ranks, every id exactly once in each epoch, and the two epochs in other orders."""
    for epoch, parts in enumerate(zip(*(record["epochs"] for record in records), strict=True)):
        assert Counter(parts[0] + parts[1]) == Counter(range(TOTAL)), epoch
    assert records[0]["epochs"][0] != records[0]["epochs"][1]


def _summed(records: list[dict[str, Any]], counter: str) -> int:
    return sum(record["stats"][counter] for record in records)


def _cached_shards(run: Run, folder: str) -> list[str]:
    """The shards in ``CACHE/<folder>``, by name; fails on a file that is not a whole shard, its lock
    file, the eviction lock or a kept index (a partial fetch, a leftover temporary file)."""
    shards = []
    for entry in sorted(os.listdir(run.cache / folder)):
        path = run.cache / folder / entry
        shard = re.fullmatch(r"[0-9a-f]{16}\.(train-\d{6}\.tar)", entry)
        if shard:
            assert path.read_bytes() == (run.data / folder / shard[1]).read_bytes(), f"partial: {entry}"
            shards.append(shard[1])
            continue
        lock = re.fullmatch(r"\.([0-9a-f]{16}\.train-\d{6}\.tar|evict)\.lock", entry)
        assert lock or re.fullmatch(r"index-[0-9a-f]{16}\.json", entry), f"not a cache file: {entry}"
        assert not lock or path.stat().st_size == 0, entry
    return shards


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["w0", "w2"])  # 0 and 2 DataLoader workers per rank
def test_two_ranks_fetch_each_shard_once_into_a_shared_cache(run: Run, folder: str) -> None:
    """Two ranks share one ``cache.dir`` over http:// shards: the server sends each shard whole once
    for both (fetched into the cache by one rank, reused by the other), the index once (rank 0 reads
    it) and no header read (the epochs read the cached copies); every id arrives once per epoch."""
    records = [record[folder] for record in run.records["cached"]]
    _each_epoch_once(records)
    building, reading = _phases(run, folder)
    assert [r for r in building if r[0] == "GET"] == [("GET", f"/{folder}/{INDEX_NAME}", "")]
    assert _whole_gets(run, folder, reading) == Counter(SHARD_NAMES)
    assert _summed(records, "cache_fetches") == len(COUNTS)
    assert _summed(records, "cache_evictions") == 0
    assert sorted(_cached_shards(run, folder)) == SHARD_NAMES


@pytest.mark.slow
def test_a_cache_limit_of_two_shards_evicts_and_every_id_still_arrives_once(run: Run) -> None:
    """``cache.limit`` of two shards shared by two ranks: shards are evicted (the report counts it)
    and fetched again whole, never in part, every id arrives once per epoch, and the folder ends
    with whole shards only, fewer than all of them."""
    records = run.records["limited"]
    _each_epoch_once(records)
    building, reading = _phases(run, "limited")
    assert [r for r in building if r[0] == "GET"] == [("GET", f"/limited/{INDEX_NAME}", "")]
    fetches = _whole_gets(run, "limited", reading)
    assert set(fetches) == set(SHARD_NAMES) and fetches.total() > len(COUNTS), fetches
    assert _summed(records, "cache_fetches") == fetches.total()  # the report counts what the server saw
    assert _summed(records, "cache_evictions") > 0
    assert len(_cached_shards(run, "limited")) < len(COUNTS)


@pytest.mark.slow
def test_without_an_index_rank_0_alone_builds_it_and_both_cover_the_data(run: Run) -> None:
    """No index beside the shards: rank 0 builds it (one walk of each shard's headers, every read the
    server saw while building was its own), rank 1 reads nothing to build it; both agree on
    ``len()``, every id arrives once per epoch, each shard is fetched whole once, and the index
    built is kept in the cache."""
    first, second = (record for record in run.records["unindexed"])
    assert first["built"]["build index"] == 1 and first["built"]["shards indexed"] == len(COUNTS)
    assert second["built"] == {}
    assert first["dataset_len"] == second["dataset_len"] == TOTAL
    assert first["loader_len"] == second["loader_len"]
    _each_epoch_once(run.records["unindexed"])
    building, reading = _phases(run, "unindexed")
    gets = [path for method, path, _ in building if method == "GET"]
    assert len(gets) == first["built"]["read http"] + first["built"]["read_range http"]
    assert Counter(gets)[f"/unindexed/{INDEX_NAME}"] == 1  # rank 0 looked for it, once
    assert {path.removeprefix("/unindexed/") for path in gets} == {*SHARD_NAMES, INDEX_NAME}
    assert _whole_gets(run, "unindexed", reading) == Counter(SHARD_NAMES)
    assert sorted(_cached_shards(run, "unindexed")) == SHARD_NAMES
    kept = [name for name in os.listdir(run.cache / "unindexed") if name.startswith("index-")]
    assert len(kept) == 1
    index = json.loads((run.cache / "unindexed" / kept[0]).read_text())
    assert [entry["samples"] for entry in index["shards"]] == COUNTS


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["torch", "sharded"])
def test_uneven_balance_gives_ranks_one_sample_apart(run: Run, kind: str) -> None:
    """53 samples on 2 ranks under ``balance: uneven``, two a batch: 27 and 26 samples, ``len()`` 14
    and 13 (what each rank then draws), every id exactly once."""
    first, second = (record[kind] for record in run.records["uneven"])
    assert (len(first["ids"]), len(second["ids"])) == (27, 26)
    assert first["len"] == first["steps"] and second["len"] == second["steps"]
    assert first["len"] - second["len"] == 1
    assert Counter(first["ids"] + second["ids"]) == Counter(range(TOTAL))
