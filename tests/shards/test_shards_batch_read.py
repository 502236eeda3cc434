"""``ShardsDataset.__getitems__``: a batch read by runs gives exactly what ``dataset[i]`` gives."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from counting_http_server import CountingRangeHandler, serving
from packed_items import assert_same
from shards_data import id_samples, tar_bytes, write_parquet_shards, write_tar_shards

import loaderfactory
from loaderfactory.shards import ShardError, ShardsDataset
from loaderfactory.shards.formats.tar import shard as tar_format
from loaderfactory.shards.read.batch import batch_runs

COUNTS = [5, 3, 7, 1, 6]


def _index_lists(total: int) -> list[list[int]]:
    shuffled = list(range(total))
    random.Random(7).shuffle(shuffled)
    return [
        list(range(total)),  # every shard boundary inside one batch
        list(range(3, 11)),  # a run ending and another starting mid-batch
        shuffled,
        [total - 1, -1, -total, 0, 0, 1, 2, 4, 5],  # negative, repeated, a boundary between 4 and 5
        [],
    ]


@pytest.mark.parametrize("kind", ["tar", "parquet"])
def test_a_batch_equals_its_samples_one_by_one(tmp_path: Path, kind: str) -> None:
    write = write_tar_shards if kind == "tar" else write_parquet_shards
    urls = write(tmp_path, COUNTS)
    dataset = ShardsDataset(urls, open_shards=2)
    for indices in _index_lists(len(dataset)):
        assert_same(list(dataset.__getitems__(indices)), [dataset[i] for i in indices], "batch")
    dataset.close()


def test_runs_split_at_shard_boundaries_and_breaks_in_order() -> None:
    ends = [5, 8, 15]
    assert batch_runs(ends, [3, 4, 5, 6, 9, 8, 20, 14, -1]) == [
        (0, 2, 0, 3),
        (2, 4, 1, 0),
        (4, 5, 2, 1),
        (5, 6, 2, 0),
        (6, 7, -1, 0),
        (7, 8, 2, 6),
        (8, 9, 2, 6),
    ]


def _error(call: Any) -> str:
    with pytest.raises(Exception) as caught:
        call()
    return f"{caught.type.__name__}: {caught.value}"


def test_a_batch_raises_what_the_first_failing_sample_raises(tmp_path: Path) -> None:
    """A field that does not decode, a field missing, an index out of range: the batch's error is the
    one ``dataset[i]`` raises for its first failing sample, naming the URL and the sample."""
    samples = id_samples(0, 6)
    samples[3]["json"] = b"{not json"
    path = tmp_path / "bad.tar"
    path.write_bytes(tar_bytes(samples))
    dataset = ShardsDataset([str(path)])
    batch_error = _error(lambda: dataset.__getitems__([1, 2, 3, 4]))
    assert batch_error == _error(lambda: dataset[3])
    assert str(path) in batch_error and "'sample000003'" in batch_error
    assert _error(lambda: dataset.__getitems__([0, 1, 6])) == _error(lambda: dataset[6])
    keyed = ShardsDataset([str(path)], keys=["cls", "seg.png"])
    batch_error = _error(lambda: keyed.__getitems__([0, 1]))
    assert isinstance(batch_error, str) and batch_error == _error(lambda: keyed[0])
    assert "ShardError" in batch_error and "'seg.png'" in batch_error
    with pytest.raises(ShardError):
        keyed.__getitems__([5, 4])


def test_the_torch_loader_reads_batches_by_runs_without_loss(tmp_path: Path) -> None:
    """Through ``build_loader`` (torch's fetcher calls ``__getitems__``): every id once, in order."""
    write_tar_shards(tmp_path, COUNTS)
    config = {
        "dataset": {"kind": "shards", "urls": f"{tmp_path}/"},
        "loader": {"kind": "torch", "batch_size": 4, "num_workers": 0},
    }
    loader = loaderfactory.build_loader(config)
    ids = [int(i) for batch in loader for i in batch["cls"]]
    assert ids == list(range(sum(COUNTS)))


def test_a_run_longer_than_one_read_is_read_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs split into several reads of at most ``RUN_BYTES`` (one sample at least) read the same."""
    monkeypatch.setattr(tar_format, "RUN_BYTES", 6000)  # about two 3 KB samples per read
    dataset = ShardsDataset(write_tar_shards(tmp_path, COUNTS))
    indices = list(range(len(dataset)))
    assert_same(list(dataset.__getitems__(indices)), [dataset[i] for i in indices], "batch")
    monkeypatch.setattr(tar_format, "RUN_BYTES", 1)  # every sample alone
    assert_same(list(dataset.__getitems__(indices)), [dataset[i] for i in indices], "batch")


class Unavailable(CountingRangeHandler):
    """Answers the paths in ``down`` with 503 Service Unavailable, the others as files."""

    down: set[str]

    def do_GET(self) -> None:
        if self.path in self.down:
            self.send_error(503, "try again")
            return
        super().do_GET()


def test_a_shard_that_cannot_be_opened_is_tried_once_per_batch(
    tmp_path: Path, fsspec_io_thread: None
) -> None:
    """A server answering 503 for one shard: the batch raises what ``dataset[i]`` raises for the
    run's first sample after one round of retries, not one more round to find that error."""
    from loaderfactory.shards import StorageError

    names = [Path(p).name for p in write_tar_shards(tmp_path, COUNTS)]
    down: set[str] = set()
    with serving(tmp_path, Unavailable, down=down) as (base, _):
        dataset = ShardsDataset([f"{base}/{name}" for name in names], retries=2)
        down.add(f"/{names[1]}")  # the shard of samples 5 to 7
        with pytest.raises(StorageError, match=r"sample #0 of the shard \(#5 overall\)"):
            dataset.__getitems__([5, 6, 7])
        assert dataset.stats()["retries"] == 2
        dataset.close()


def test_a_run_whose_read_fails_after_the_retries_is_not_read_again(
    tmp_path: Path, fsspec_io_thread: None
) -> None:
    """Range reads of an open shard that keep failing: the batch raises the storage error after one
    round of retries, naming the run's samples, instead of retrying each sample again."""
    from loaderfactory.shards import StorageError

    names = [Path(p).name for p in write_tar_shards(tmp_path, COUNTS)]
    down: set[str] = set()
    with serving(tmp_path, Unavailable, down=down) as (base, _):
        dataset = ShardsDataset([f"{base}/{name}" for name in names], retries=2, fetch="range")
        assert dataset[5]["cls"] == 5  # shard 1 is open: its headers were read
        down.add(f"/{names[1]}")
        with pytest.raises(StorageError, match=r"samples #0 to #2 of the shard \(#5 to #7 overall\)"):
            dataset.__getitems__([5, 6, 7])
        assert dataset.stats()["retries"] == 2
        dataset.close()
