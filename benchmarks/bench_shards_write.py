"""The data of bench_shards.py: the same items written by each library's own writer, and uploaded to S3.

Item ``i`` of a set is ``{"data": <item_bytes random uint8>, "label": i % 1000}``. Each library
writes it in its own format with its own writer, in shards of about ``shard_bytes``:

- ``ours``: ``loaderfactory.pack`` (webdataset tar: ``data.npy`` + ``label.cls``) and its index;
- ``wds``: webdataset's ``ShardWriter`` (tar: ``data.npy`` + ``label.cls``);
- ``litdata``: ``BinaryWriter``, what ``litdata.optimize`` writes with (its chunks and ``index.json``);
- ``mosaic``: streaming's ``MDSWriter`` (``ndarray:uint8`` + ``int`` columns).

A folder holds a ``done.json`` once written, so a later run with the same sizes reuses it.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

LIBRARIES = ("ours", "wds", "litdata", "mosaic")
LABELS = 1000


class Items:
    """``count`` items of ``item_bytes`` random bytes each, the same whoever reads them (picklable)."""

    def __init__(self, count: int, item_bytes: int, seed: int = 0) -> None:
        self.count, self.item_bytes, self.seed = count, item_bytes, seed
        self._pool: np.ndarray | None = None

    def _bytes(self) -> np.ndarray:
        if self._pool is None:  # 4 MiB of random bytes; item i starts at a different offset
            self._pool = np.random.default_rng(self.seed).integers(0, 256, 4 << 20, dtype=np.uint8)
        return self._pool

    def __len__(self) -> int:
        return self.count

    def array(self, index: int) -> np.ndarray:
        start = (index * 7919) % (len(self._bytes()) - self.item_bytes)
        return self._bytes()[start : start + self.item_bytes].copy()

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.count:
            raise IndexError(index)
        import torch

        return {"data": torch.from_numpy(self.array(index)), "label": index % LABELS}


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def write_ours(items: Items, out: Path, shard_bytes: int) -> None:
    from loaderfactory import pack

    pack(items, str(out), shard_size=shard_bytes, format="tar", num_workers=0)


def write_wds(items: Items, out: Path, shard_bytes: int) -> None:
    import webdataset as wds

    out.mkdir(parents=True)
    pattern = str(out / "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxsize=shard_bytes, maxcount=10**9, verbose=0) as sink:
        for index in range(len(items)):
            sink.write(
                {"__key__": f"{index:09d}", "data.npy": _npy(items.array(index)), "label.cls": index % LABELS}
            )


def write_litdata(items: Items, out: Path, shard_bytes: int) -> None:
    """litdata's ``BinaryWriter``, the writer ``litdata.optimize`` runs in each of its workers
    (``optimize`` itself managed about 600 items/s here, and its worker died once on 125 000 items)."""
    from litdata.streaming.writer import BinaryWriter

    out.mkdir(parents=True)
    writer = BinaryWriter(str(out), chunk_bytes=shard_bytes)
    for index in range(len(items)):
        writer[index] = {"data": items.array(index), "label": index % LABELS}
    writer.done()
    writer.merge()


def write_mosaic(items: Items, out: Path, shard_bytes: int) -> None:
    from streaming import MDSWriter

    columns = {"data": "ndarray:uint8", "label": "int"}
    with MDSWriter(out=str(out), columns=columns, size_limit=shard_bytes) as writer:
        for index in range(len(items)):
            writer.write({"data": items.array(index), "label": index % LABELS})


WRITERS = {"ours": write_ours, "wds": write_wds, "litdata": write_litdata, "mosaic": write_mosaic}


def data_files(folder: Path) -> list[Path]:
    """Every file a reader of ``folder`` reads (shards and index), for the cold-cache runs."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "done.json")


def ensure_written(root: Path, name: str, items: Items, shard_bytes: int, log: Any = print) -> None:
    """Write set ``name`` for every library under ``root/<library>/<name>`` unless already there."""
    wanted = {"count": items.count, "item_bytes": items.item_bytes, "shard_bytes": shard_bytes}
    for library in LIBRARIES:
        folder = root / library / name
        done = folder / "done.json"
        if done.is_file() and json.loads(done.read_text()) == wanted:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        log(f"writing {library}/{name}: {items.count} items of {items.item_bytes} bytes")
        WRITERS[library](items, folder, shard_bytes)
        done.write_text(json.dumps(wanted))


def upload(root: Path, folder: Path, endpoint: dict[str, str], bucket: str) -> None:
    """Copy ``folder``'s files to ``s3://bucket/``, keyed by their path under ``root``."""
    import s3fs

    fs = s3fs.S3FileSystem(
        key=endpoint["key"], secret=endpoint["secret"], endpoint_url=endpoint["endpoint_url"]
    )
    for path in data_files(folder):
        fs.put_file(str(path), f"{bucket}/{path.relative_to(root)}")
