"""Shards over ``http://``: a local HTTP server that honours Range requests, read through ShardsDataset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from http_server import ShardServer
from shards_data import write_tar_shards

from loaderfactory.shards import ShardsDataset, Storage, build_index


@pytest.fixture
def http_folder(tmp_path: Path, fsspec_io_thread: None) -> Iterator[tuple[Path, str]]:
    """``tmp_path`` served on a free loopback port (tests/support/http_server.py); stopped after the test."""
    server = ShardServer(tmp_path)
    try:
        yield tmp_path, server.url
    finally:
        server.close()


def test_http_shards_give_every_id_once(http_folder: tuple[Path, str]) -> None:
    """Tar shards served over HTTP are indexed by range reads and give each sample id once."""
    folder, base = http_folder
    names = [Path(p).name for p in write_tar_shards(folder, [4, 2, 3])]
    urls = [f"{base}/{name}" for name in names]
    shards = build_index(urls, Storage(), progress=False)
    dataset = ShardsDataset(urls, index=shards)
    assert [dataset[i]["cls"] for i in range(len(dataset))] == list(range(9))
    with pytest.raises(FileNotFoundError, match=rf"{base}/absent\.tar"):
        Storage().read(f"{base}/absent.tar")
