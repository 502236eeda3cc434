"""A resumed shards epoch asks for no sample before its position and opens only the shards that
hold the rest: it goes to the right shard at the right sample instead of reading up to it."""

from __future__ import annotations

import bisect
import itertools
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from shards_data import write_tar_shards

import loaderfactory
from loaderfactory.shards import ShardsDataset
from loaderfactory.shards.read.reader import ShardReader

COUNTS = [6, 9, 4, 7, 5, 8, 6, 5]
"""50 samples in 8 uneven shards; a sample's ``cls`` is its global index."""
ENDS = list(itertools.accumulate(COUNTS))


def _append(log: Path, line: str) -> None:
    """One line, whole, whatever process writes it (an ``O_APPEND`` write of a short line)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@pytest.fixture
def reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A log of every shard opened (``open <url>``: as asked for, or ahead of it) and every index
    asked for (``read <i>...``) by any process reading a :class:`ShardsDataset`, DataLoader
    workers included."""
    log = tmp_path / "reads.log"
    open_shard, get_items, get_item = (
        ShardReader.open_shard,
        ShardsDataset.__getitems__,
        ShardsDataset.__getitem__,
    )

    def logged_open(self: ShardReader, info: Any) -> Any:
        _append(log, f"open {info.url}")
        return open_shard(self, info)

    in_batch = [False]  # __getitems__ reads a run of one sample through __getitem__

    def logged_items(self: ShardsDataset, indices: list[int]) -> Any:
        _append(log, "read " + " ".join(map(str, indices)))
        in_batch[0] = True
        try:
            return get_items(self, indices)
        finally:
            in_batch[0] = False

    def logged_item(self: ShardsDataset, index: int) -> Any:
        if not in_batch[0]:
            _append(log, f"read {index}")
        return get_item(self, index)

    def logged_open_ahead(self: ShardReader, number: int, *, _open: Any = ShardReader.open_local) -> Any:
        _append(log, f"open {self.shards[number].url}")
        return _open(self, number)

    monkeypatch.setattr(ShardReader, "open_shard", logged_open)
    monkeypatch.setattr(ShardReader, "open_local", logged_open_ahead)
    monkeypatch.setattr(ShardsDataset, "__getitems__", logged_items)
    monkeypatch.setattr(ShardsDataset, "__getitem__", logged_item)
    return log


def _logged(log: Path) -> tuple[list[str], list[int]]:
    """(the shards opened, the indices asked for) since the log was last emptied."""
    lines = log.read_text().splitlines() if log.exists() else []
    opened = [line.split(" ", 1)[1] for line in lines if line.startswith("open ")]
    asked = [int(i) for line in lines if line.startswith("read ") for i in line.split()[1:]]
    return opened, asked


def _ids(batches: Any) -> list[int]:
    return [int(i) for batch in batches for i in batch["cls"]]


@pytest.mark.parametrize(
    ("kind", "workers", "shuffle"),
    [("torch", 0, False), ("torch", 2, False), ("torch", 2, True), ("sharded", 0, True)],
)
def test_a_resume_reads_only_what_remains(
    tmp_path: Path, reads: Path, kind: str, workers: int, shuffle: bool
) -> None:
    urls = write_tar_shards(tmp_path / "data", COUNTS)
    config = {
        "dataset": {"kind": "shards", "urls": urls, "shuffle_window": 2, "open_shards": 2},
        "loader": {"kind": kind, "batch_size": 4, "shuffle": shuffle, "num_workers": workers},
        "seed": 5,
    }
    with loaderfactory.build_loader(config) as loader:
        epoch = _ids(loader)
    with loaderfactory.build_loader(config) as loader:
        before = _ids(itertools.islice(iter(loader), 7))  # 28 of 50 samples: shard 4 begun
        state = json.loads(json.dumps(loader.state_dict()))
    reads.unlink()

    with loaderfactory.build_loader(config) as resumed:
        resumed.load_state_dict(state)
        after = _ids(resumed)
    opened, asked = _logged(reads)

    assert before + after == epoch and Counter(epoch) == Counter(range(ENDS[-1]))
    assert Counter(asked) == Counter(after)  # no sample before the position asked for, none twice
    needed = {urls[bisect.bisect_right(ENDS, i)] for i in after}
    assert set(opened) == needed
    if not shuffle:
        assert sorted(needed) == urls[4:]  # shards 0 to 3, read before the state, are not opened
