"""The shards dataset's counters: summed over DataLoader workers and threads, and never left behind."""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from shards_data import sample_bytes, write_indexed_tar_shards
from torch.utils.data import DataLoader

from loaderfactory.shards import ShardsDataset
from loaderfactory.shards.stats import ShardStats

ROOT = Path(__file__).resolve().parents[2]
COUNTS = [5, 7, 3, 6]


def _indexed(folder: Path) -> ShardsDataset:
    return ShardsDataset(write_indexed_tar_shards(folder, COUNTS))


def _identity(batch: list[dict[str, object]]) -> list[dict[str, object]]:
    return batch


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_counts_reach_the_main_process(tmp_path: Path, persistent: bool) -> None:
    """Samples read over 2 epochs in 2 forked worker processes (persistent or not) count in the main
    process's stats(): every sample's bytes each epoch, every shard opened, the workers included.
    (Spawned workers: tests/shards/test_shards_report.py, through the command.)"""
    epochs = 2
    dataset = _indexed(tmp_path)
    before = dataset.stats()
    assert before["shards_opened"] == 0 and before["processes"] == 1  # the index, read here
    loader = DataLoader(
        dataset,
        batch_size=4,
        num_workers=2,
        multiprocessing_context="fork",
        persistent_workers=persistent,
        collate_fn=_identity,
    )
    read = sum(len(batch) for _ in range(epochs) for batch in loader)
    del loader
    stats = dataset.stats()
    assert read == epochs * sum(COUNTS)
    assert stats["bytes_read_local"] - before["bytes_read_local"] >= epochs * sample_bytes(
        [info.url for info in dataset.shards]
    )
    assert stats["shards_opened"] >= len(COUNTS)
    assert stats["processes"] >= 3  # this one and at least two workers
    assert stats["bytes_read_remote"] == stats["retries"] == stats["cache_fetches"] == 0


def test_threads_add_without_losing_counts(tmp_path: Path) -> None:
    """Eight threads adding at once lose nothing: each thread has a row of its own."""
    stats = ShardStats()

    def add_many(_: int) -> None:
        for _ in range(5000):
            stats.add("hits")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(add_many, range(8)))
    assert stats.totals()["hits"] == 8 * 5000


def test_a_row_being_created_counts_as_zero() -> None:
    """Totals read while another process creates its row (the file there, not yet its length):
    the rows that are there add up, the new one adds nothing."""
    stats = ShardStats()
    stats.add("hits", 3)
    Path(stats.folder, "999999-1").write_bytes(b"")
    Path(stats.folder, "999999-2").write_bytes((7).to_bytes(8, "little")[:5])
    totals = stats.totals()
    assert totals["hits"] == 3 and totals["processes"] == 2


def test_the_counters_folder_goes_with_the_dataset(tmp_path: Path) -> None:
    """The counters' folder lives as long as its dataset, whatever a forked copy does."""
    dataset = _indexed(tmp_path)
    folder = Path(dataset.counters.folder)
    dataset[0]
    child = multiprocessing.get_context("fork").Process(target=_drop_copy, args=(dataset,))
    child.start()
    child.join(30)
    assert child.exitcode == 0 and folder.is_dir()  # a forked copy collected in the child spares it
    del dataset
    gc.collect()
    assert not folder.exists()


def _drop_copy(dataset: ShardsDataset) -> None:
    dataset[1]
    del dataset
    gc.collect()


def test_the_counters_folder_is_removed_at_exit(tmp_path: Path) -> None:
    """A process that ends with its dataset alive removes the counters' folder on the way out."""
    _indexed(tmp_path)
    code = f"from loaderfactory.shards import ShardsDataset\nd = ShardsDataset({str(tmp_path) + '/'!r})\n"
    code += "d[0]\nprint(d.counters.folder)\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("loaderfactory-stats-") and not folder.exists()


WRAPPERS = {
    "queue": {
        "queue": {"kind": "ram", "epoch_size": 6, "num_workers": 2, "worker_type": "process", "batch_size": 4}
    },
    "sharded": {"loader": {"kind": "sharded", "batch_size": 4, "num_workers": 2}},
    "stream": {"loader": {"kind": "torch", "batch_size": 4}, "stream": {"kind": "epochs", "buffer_size": 2}},
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_the_run_report_finds_the_shards_behind_any_kind(tmp_path: Path, wrapper: str) -> None:
    """A run through a queue filled by worker processes, a ``sharded`` loader with workers or a
    stream reports the shards it read, counted where they were read."""
    from loaderfactory import validate
    from loaderfactory.hydra.job import run_job

    _indexed(tmp_path / "data")
    config = {"dataset": {"kind": "shards", "urls": f"{tmp_path / 'data'}/"}, **WRAPPERS[wrapper]}
    config["run"] = {"progress": False, "batches": 5}
    report = run_job(validate(config), tmp_path, lambda text: None)
    assert report["shards"]["shards_opened"] >= 1
    assert report["shards"]["bytes_read_local"] > 0
    if wrapper == "stream":
        assert report["shards"]["processes"] == 1
    else:  # the main process and the workers that read before the run's 5 batches were taken
        assert report["shards"]["processes"] in (2, 3)
