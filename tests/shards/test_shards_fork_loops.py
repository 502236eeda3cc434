"""fsspec's event loop in a forked DataLoader worker: stopped there, so the parent's s3fs filesystems
dropped in the worker close at once instead of waiting a second each on a loop no thread runs."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from typing import Any

import pytest
from s3_server import S3Server

import loaderfactory
from loaderfactory.shards import pack

fsspec = pytest.importorskip("fsspec")
s3fs = pytest.importorskip("s3fs")


def _filesystem(s3: S3Server, **extra: Any) -> Any:
    """An s3fs filesystem as user code makes one: kept in fsspec's instance cache, its loop running."""
    fs = fsspec.filesystem("s3", endpoint_url=s3.endpoint_url, key=s3.key, secret=s3.secret, **extra)
    fs.ls(s3.bucket)
    return fs


def _report_loop(fs: Any, answer: Any) -> None:
    answer.send(fs._loop.is_running())


def test_a_forked_child_sees_the_copied_loop_stopped_and_the_parent_still_running(s3: S3Server) -> None:
    fs = _filesystem(s3)
    context = multiprocessing.get_context("fork")
    parent_end, child_end = context.Pipe()
    child = context.Process(target=_report_loop, args=(fs, child_end))
    child.start()
    in_child = parent_end.recv()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert in_child is False
    assert fs._loop.is_running()
    fs.pipe(f"{s3.bucket}/fork-loops/after-fork", b"still served")  # the parent's loop works on
    assert fs.cat(f"{s3.bucket}/fork-loops/after-fork") == b"still served"


def test_workers_read_s3_shards_whole_beside_the_parents_cached_filesystems(s3: S3Server) -> None:
    """Three s3fs filesystems in the parent's fsspec cache, emptied in each worker: every item once."""
    out = s3.url("fork-loops/")
    pack(
        [{"id": i} for i in range(12)],
        out,
        shard_size=4096,
        storage_options=s3.storage_options,
        progress=False,
    )
    kept = [_filesystem(s3, default_block_size=2**20 + n) for n in range(3)]
    config = {
        "dataset": {"kind": "shards", "urls": out, "storage_options": s3.storage_options},
        "loader": {"kind": "torch", "batch_size": None, "num_workers": 2},
    }
    with loaderfactory.build_loader(config) as loader:
        ids = [int(sample["id"]) for sample in loader]
    assert Counter(ids) == Counter(range(12))
    assert all(fs._loop.is_running() for fs in kept)
