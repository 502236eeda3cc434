"""Remote shards are fetched whole once per rank into a private cache its workers share, and
predownload in DataLoader workers follows the epoch's real order."""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from counting_http_server import serving
from s3_server import S3Server
from shards_data import id_samples, tar_bytes, write_tar_shards
from torch.utils.data import Subset

import loaderfactory
from loaderfactory.errors import ConfigError
from loaderfactory.shards import INDEX_NAME, ShardsDataset, Storage, build_index, save_index
from loaderfactory.shards.order import window_order
from loaderfactory.shards.read.predownload import Predownloader
from loaderfactory.shards.storage.cache import ShardCache
from loaderfactory.shards.storage.private_folder import PREFIX

COUNTS = [12, 9, 14, 10, 11, 8]
"""Six uneven shards of a few KiB each; ids run on across them."""
SEED = 3
_DRAW = {"_target_": f"{__name__}.draw", "_partial_": True}
"""``dataset.transforms`` entry for :func:`draw`."""


@pytest.fixture
def http_shards(tmp_path: Path, fsspec_io_thread: None) -> Iterator[tuple[list[str], Counter[str]]]:
    """``COUNTS`` tar shards and their index served over HTTP: (shard URLs, body bytes sent per path)."""
    folder = tmp_path / "served"
    paths = write_tar_shards(folder, COUNTS)
    save_index(build_index(paths, Storage(), progress=False), str(folder / INDEX_NAME), Storage())
    with serving(folder) as (base, served):
        yield [f"{base}/{Path(path).name}" for path in paths], served


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The system's temporary folder, where private caches go, made this test's own (a short one
    beside the system's: worker processes make sockets in it)."""
    folder = Path(tempfile.mkdtemp(prefix="lf-test-"))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _config(urls: Any, num_workers: int = 2, **dataset: Any) -> dict[str, Any]:
    shards = {"kind": "shards", "urls": urls, "shuffle_window": 2, "open_shards": 2, **dataset}
    loader = {"kind": "torch", "batch_size": 4, "shuffle": True, "num_workers": num_workers}
    return {"dataset": shards, "loader": loader, "seed": SEED}


def _ids(batches: Any) -> Counter[int]:
    return Counter(int(i) for batch in batches for i in batch["cls"])


def _private_folders(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith(PREFIX))


@pytest.fixture(scope="session")
def resource_tracker() -> None:
    """Start multiprocessing's resource tracker (one process, alive for the session by design), which
    a spawn-context DataLoader starts, before a test takes its census of child processes."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_two_workers_read_each_http_shard_about_once(
    http_shards: tuple[list[str], Counter[str]], private_tmp: Path, context: str, resource_tracker: None
) -> None:
    """A shuffled epoch through 2 workers (forked, or spawned with predownload) sends each shard's
    bytes about once (fetched whole into the private cache the workers share, not walked and
    range-read by each) and gives every id once."""
    urls, served = http_shards
    config = _config(urls, predownload=8 if context == "spawn" else 0)
    config["loader"]["multiprocessing_context"] = context
    with loaderfactory.build_loader(config) as loader:
        assert _ids(loader) == Counter(range(sum(COUNTS)))
        sizes = {
            f"/{Path(url).name}": info.bytes for url, info in zip(urls, loader.dataset.shards, strict=True)
        }
    over = {path: served[path] / size for path, size in sizes.items() if served[path] > 1.1 * size}
    assert not over, f"shards served more than 1.1 × their size: {over}"
    assert all(served[path] >= size for path, size in sizes.items())
    assert _private_folders(private_tmp) == []  # removed with the loader


def test_range_fetch_reads_every_id_without_a_cache(
    http_shards: tuple[list[str], Counter[str]], private_tmp: Path
) -> None:
    """``fetch: range`` reads by byte ranges: every id once through 2 workers, no folder created."""
    urls, _ = http_shards
    with loaderfactory.build_loader(_config(urls, fetch="range")) as loader:
        assert loader.dataset.cache is None and _private_folders(private_tmp) == []
        assert _ids(loader) == Counter(range(sum(COUNTS)))


def test_the_private_cache_is_bounded_by_cache_limit_or_its_own_estimate(
    http_shards: tuple[list[str], Counter[str]], private_tmp: Path
) -> None:
    """Without ``cache.dir`` the private folder holds the cache: bounded by ``cache.limit`` when set
    (a limit below a shard refused, no folder left), else by what ``open_shards`` need."""
    urls, _ = http_shards
    largest = max(info.bytes for info in build_index(urls, Storage(), progress=False))
    with loaderfactory.build_loader(_config(urls, 0)) as loader:
        cache = loader.dataset.cache
        assert cache.dir.parent == private_tmp and cache.limit == largest * (2 + 1)  # open_shards: 2
    with loaderfactory.build_loader(_config(urls, 0, cache={"limit": 4 * largest})) as loader:
        assert loader.dataset.cache.limit == 4 * largest
        assert _ids(loader) == Counter(range(sum(COUNTS)))
    with pytest.raises(ConfigError, match=r"dataset\.cache\.limit: cache.limit .* is smaller than the shard"):
        loaderfactory.build_loader(_config(urls, 0, cache={"limit": largest // 2}))
    assert _private_folders(private_tmp) == []


def test_s3_shards_are_fetched_once_each_by_two_workers(
    s3: S3Server, fsspec_io_thread: None, tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over S3, a shuffled epoch through 2 workers fetches each shard once and gives every id once."""
    storage, urls, first = Storage(s3.storage_options), [], 0
    for number, count in enumerate(COUNTS):
        urls.append(s3.url(f"fetch/once/train-{number:06d}.tar"))
        storage.write(urls[-1], tar_bytes(id_samples(first, count)))
        first += count
    save_index(build_index(urls, storage, progress=False), s3.url(f"fetch/once/{INDEX_NAME}"), storage)
    fetches = _log_downloads(monkeypatch, tmp_path / "fetches.log")
    config = _config(s3.url("fetch/once/"), storage_options=s3.storage_options)
    with loaderfactory.build_loader(config) as loader:
        assert _ids(loader) == Counter(range(sum(COUNTS)))
    assert Counter(url for _, url in fetches()) == Counter(urls)
    assert _private_folders(private_tmp) == []


def _log_downloads(monkeypatch: pytest.MonkeyPatch, log: Path) -> Any:
    """Append ``<pid> <url>`` to ``log`` on every download into a cache, in any forked process;
    returns a function reading the lines back, in the order the downloads started."""
    real = ShardCache._download

    def logged(self: ShardCache, url: str, *args: Any) -> None:
        with open(log, "a") as out:  # one short append per line: atomic between processes
            out.write(f"{os.getpid()} {url}\n")
        real(self, url, *args)

    monkeypatch.setattr(ShardCache, "_download", logged)
    return lambda: (
        [tuple(line.split(" ", 1)) for line in log.read_text().splitlines()] if log.exists() else []
    )


def _digest(order: Sequence[int] | None) -> str:
    return (
        "stored" if order is None else hashlib.sha1(np.asarray(order, dtype=np.int64).tobytes()).hexdigest()
    )


def _log_predownloads(monkeypatch: pytest.MonkeyPatch, orders: Path, fetches: Path) -> None:
    """Append ``<pid> <digest of the order>`` to ``orders`` each time a predownloader is told a read,
    and ``<pid> <shard numbers>`` to ``fetches`` each time it lists the shards to fetch ahead, nearest
    first (its threads take them in that order)."""
    advance, shards_after = Predownloader.advance, Predownloader._shards_after

    def advance_logged(self: Predownloader, index: int, order: Sequence[int] | None) -> None:
        with open(orders, "a") as out:  # one short append per line: atomic between processes
            out.write(f"{os.getpid()} {_digest(order)}\n")
        advance(self, index, order)

    def shards_after_logged(self: Predownloader, position: int) -> list[int]:
        found = shards_after(self, position)
        with open(fetches, "a") as out:
            out.write(f"{os.getpid()} {','.join(map(str, found))}\n")
        return found

    monkeypatch.setattr(Predownloader, "advance", advance_logged)
    monkeypatch.setattr(Predownloader, "_shards_after", shards_after_logged)


def _lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()]


@pytest.mark.parametrize("persistent", [False, True])
def test_predownload_in_workers_follows_each_epochs_order(
    http_shards: tuple[list[str], Counter[str]],
    tmp_path: Path,
    private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    persistent: bool,
) -> None:
    """Two shuffled epochs through 2 workers (persistent or not): every predownload in a worker goes by
    its epoch's window order (never stored order), and each worker fetches shards in that order."""
    urls, _ = http_shards
    orders, fetches = tmp_path / "orders.log", tmp_path / "fetches.log"
    _log_predownloads(monkeypatch, orders, fetches)
    config = _config(urls, predownload=sum(COUNTS))
    config["loader"]["persistent_workers"] = persistent
    epochs = [window_order(COUNTS, SEED, epoch, 2) for epoch in range(2)]
    with loaderfactory.build_loader(config) as loader:
        assert _ids(loader) == Counter(range(sum(COUNTS)))
        first_epoch = _lines(fetches)
        assert _ids(loader) == Counter(range(sum(COUNTS)))
    seen = _lines(orders)
    assert {pid for pid, _ in seen} - {str(os.getpid())}, "no predownload ran in a worker"
    assert {digest for _, digest in seen} == {_digest(order) for order in epochs}
    visits = _shard_visits(epochs[0])
    assert not _follows(visits, list(range(len(COUNTS))))  # the check below tells the two apart
    workers = {pid for pid, _ in first_epoch}
    assert len(workers) == 2
    for worker in workers:  # each worker's first look ahead: what its threads fetch first, in order
        ahead = next(shards.split(",") for pid, shards in first_epoch if pid == worker)
        assert len(ahead) >= len(COUNTS) - 2 and _follows(visits, [int(s) for s in ahead]), (ahead, visits)


def _shard_visits(order: np.ndarray) -> list[int]:
    """The shards in the order ``order`` first reads from each."""
    ends = np.cumsum(COUNTS)
    return list(dict.fromkeys(int(np.searchsorted(ends, sample, side="right")) for sample in order))


def _follows(visits: list[int], shards: list[int]) -> bool:
    """``shards`` come in the order of ``visits``."""
    places = [visits.index(shard) for shard in shards]
    return places == sorted(places)


def test_the_private_folder_is_removed_after_an_error_mid_epoch(
    http_shards: tuple[list[str], Counter[str]], private_tmp: Path
) -> None:
    """An exception in the middle of an epoch still removes the private cache folder with the loader."""
    urls, _ = http_shards
    with pytest.raises(RuntimeError, match="stop here"), loaderfactory.build_loader(_config(urls)) as loader:
        for _ in loader:
            assert len(_private_folders(private_tmp)) == 1
            raise RuntimeError("stop here")
    assert _private_folders(private_tmp) == []


def test_the_private_folder_goes_with_the_collected_dataset(
    http_shards: tuple[list[str], Counter[str]], private_tmp: Path
) -> None:
    """Never closed, a dataset still removes its folder when collected; used again after ``close()``,
    it reads in a new one."""
    urls, _ = http_shards
    dataset = ShardsDataset(urls)
    assert int(dataset[0]["cls"]) == 0 and len(_private_folders(private_tmp)) == 1
    dataset.close()
    assert _private_folders(private_tmp) == []
    assert int(dataset[13]["cls"]) == 13 and len(_private_folders(private_tmp)) == 1
    del dataset
    gc.collect()
    assert _private_folders(private_tmp) == []


def test_a_dead_processes_private_folder_is_removed_at_the_next_start(
    http_shards: tuple[list[str], Counter[str]], private_tmp: Path
) -> None:
    """A folder left by a process that is gone is removed when the next dataset starts; a live
    process's folder is kept."""
    urls, _ = http_shards
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    dead, alive = f"{PREFIX}{int(done.stdout)}-left", f"{PREFIX}{os.getppid()}-inuse"
    for name in (dead, alive):
        (private_tmp / name).mkdir()
        (private_tmp / name / "some.tar").write_bytes(b"x")
    dataset = ShardsDataset(urls)
    assert dead not in _private_folders(private_tmp) and alive in _private_folders(private_tmp)
    dataset.close()


def draw(item: dict[str, Any], generator: torch.Generator) -> dict[str, Any]:
    """A seeded transform: the sample's draw for its epoch."""
    return {**item, "draw": torch.rand(2, generator=generator)}


Epoch = tuple[Counter[int], dict[int, torch.Tensor]]
"""An epoch's ids counted, and each id's draw."""


def _epochs(config: dict[str, Any], dataset: Any = None) -> list[Epoch]:
    """Two epochs of one loader."""
    out = []
    with loaderfactory.build_loader(config, dataset=dataset) as loader:
        for _ in range(2):
            batches = list(loader)
            pairs = (zip(batch["cls"], batch["draw"], strict=True) for batch in batches)
            out.append((_ids(batches), {int(i): row for pair in pairs for i, row in pair}))
    return out


def _same_draws_each_epoch(workers: list[Epoch], alone: list[Epoch], ids: Counter[int]) -> None:
    """Each epoch through workers gives every id once and, for each, the draw it gets without
    workers; the two epochs draw anew."""
    for (counted, draws), (_, expected) in zip(workers, alone, strict=True):
        assert counted == ids
        assert draws.keys() == expected.keys() and all(torch.equal(draws[i], expected[i]) for i in draws)
    first, second = (draws for _, draws in alone)
    assert not any(torch.equal(first[i], second[i]) for i in first)


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_workers_read_the_epoch_their_batches_announce(
    http_shards: tuple[list[str], Counter[str]],
    private_tmp: Path,
    resource_tracker: None,
    context: str,
    persistent: bool,
) -> None:
    """Two shuffled epochs over remote shards with predownload through 2 workers (forked or spawned,
    persistent or not): each sample draws what it draws without workers, anew each epoch, every id
    once an epoch; the epoch reaches the workers with the batches the sampler sends them."""
    urls, _ = http_shards
    config = _config(urls, num_workers=0, predownload=sum(COUNTS), transforms=[_DRAW])
    alone = _epochs(config)
    loader = {"num_workers": 2, "persistent_workers": persistent, "multiprocessing_context": context}
    config["loader"] |= loader
    _same_draws_each_epoch(_epochs(config), alone, Counter(range(sum(COUNTS))))
    assert _private_folders(private_tmp) == []


def test_the_sharded_loaders_persistent_workers_read_each_epoch_too(
    http_shards: tuple[list[str], Counter[str]], private_tmp: Path
) -> None:
    """The ``sharded`` loader kind's persistent process workers: each epoch's draws are those without
    workers, anew each epoch, every id once an epoch; its steps tell the workers the epoch."""
    urls, _ = http_shards
    config = _config(urls, num_workers=0, predownload=sum(COUNTS), transforms=[_DRAW])
    config["loader"] |= {"kind": "sharded", "last_batch": "keep"}
    alone = _epochs(config)
    config["loader"] |= {"num_workers": 2, "persistent_workers": True}
    _same_draws_each_epoch(_epochs(config), alone, Counter(range(sum(COUNTS))))
    assert _private_folders(private_tmp) == []


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_a_subset_in_workers_reads_each_epoch_too(
    http_shards: tuple[list[str], Counter[str]],
    private_tmp: Path,
    resource_tracker: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    context: str,
) -> None:
    """A torch ``Subset`` of the dataset in 2 persistent workers: each epoch's draws are those without
    workers, anew each epoch, and (forked) predownload follows the epoch's order of the shards."""
    urls, _ = http_shards
    orders, fetches = tmp_path / "orders.log", tmp_path / "fetches.log"
    _log_predownloads(monkeypatch, orders, fetches)
    kept = list(range(0, sum(COUNTS), 3))
    shards = ShardsDataset(urls, shuffle_window=2, open_shards=2, predownload=8, transforms=draw)
    config: dict[str, Any] = {"loader": {"kind": "torch", "batch_size": 4, "shuffle": True}, "seed": SEED}
    try:
        alone = _epochs(config, Subset(shards, kept))
        config["loader"] |= {"num_workers": 2, "persistent_workers": True, "multiprocessing_context": context}
        _same_draws_each_epoch(_epochs(config, Subset(shards, kept)), alone, Counter(kept))
    finally:
        shards.close()
    if context == "fork":  # the logging patch reaches forked workers only
        workers = {pid for pid, _ in _lines(orders)} - {str(os.getpid())}
        epochs = {_digest(window_order(COUNTS, SEED, epoch, 2)) for epoch in range(2)}
        assert len(workers) == 2
        assert {digest for pid, digest in _lines(orders) if pid in workers} == epochs


def test_a_cache_limit_below_the_shuffled_window_is_refused_and_one_that_holds_it_reads(
    http_shards: tuple[list[str], Counter[str]], private_tmp: Path
) -> None:
    """A set ``cache.limit`` must hold the shuffled window's shards: below them the shuffled epoch
    refuses to start, saying what to set; a limit of exactly them delivers every id once."""
    urls, _ = http_shards
    sizes = sorted((info.bytes for info in build_index(urls, Storage(), progress=False)), reverse=True)
    window = sum(sizes[:3])
    config = _config(urls, 0, shuffle_window=3, open_shards=3, cache={"limit": window - 1})
    with (
        loaderfactory.build_loader(config) as loader,
        pytest.raises(
            ValueError,
            match=rf"cache.limit .* cannot hold shuffle_window=3: .*raise cache.limit to .*"
            rf"\({window} bytes\)",
        ),
    ):
        list(loader)
    config = _config(urls, 2, shuffle_window=3, open_shards=3, cache={"limit": window})
    with loaderfactory.build_loader(config) as loader:
        assert _ids(loader) == Counter(range(sum(COUNTS)))


def test_a_shuffled_batch_advances_predownload_once_not_once_per_shard(
    http_shards: tuple[list[str], Counter[str]], private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shuffled batch touches most shards of its window; predownload looks ahead once for the batch
    (and once when a shard is first opened), not once for each shard it reads from."""
    urls, _ = http_shards
    calls: list[int] = []
    advance = Predownloader.advance

    def counted(self: Predownloader, index: int, order: Sequence[int] | None) -> None:
        calls.append(index)
        advance(self, index, order)

    monkeypatch.setattr(Predownloader, "advance", counted)
    config = _config(
        urls, num_workers=0, predownload=sum(COUNTS), shuffle_window=len(COUNTS), open_shards=None
    )
    config["loader"]["batch_size"] = 8
    with loaderfactory.build_loader(config) as loader:
        batches = list(loader)
        assert _ids(batches) == Counter(range(sum(COUNTS)))
    ends = np.cumsum(COUNTS)
    touched = sum(len({int(np.searchsorted(ends, int(i), side="right")) for i in b["cls"]}) for b in batches)
    assert touched > 2 * len(batches)  # batches do span shards: per-shard advancing would show
    assert len(calls) <= len(batches) + 2 * len(COUNTS)
