"""Small webdataset tars and Parquet files for the shards tests, each sample carrying its global id."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np


def tar_bytes(samples: Sequence[Mapping[str, bytes]]) -> bytes:
    """A tar of ``samples``, each ``{"__key__": ..., field: data}``; members in sample order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for sample in samples:
            key = sample["__key__"].decode()
            for field, data in sample.items():
                if field == "__key__":
                    continue
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def id_samples(first: int, count: int) -> list[dict[str, bytes]]:
    """Samples ``first`` .. ``first + count - 1``: ``cls`` is the id, ``npy`` a vector of it, ``json`` too."""
    return [
        {
            "__key__": f"sample{i:06d}".encode(),
            "cls": str(i).encode(),
            "npy": npy_bytes(np.full(3, i, dtype=np.int64)),
            "json": json.dumps({"id": i}).encode(),
        }
        for i in range(first, first + count)
    ]


def write_tar_shards(folder: Path, counts: Sequence[int]) -> list[str]:
    """Tar shards ``train-000000.tar``... in ``folder`` with ``counts[k]`` samples each; ids run on."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, first = [], 0
    for number, count in enumerate(counts):
        path = folder / f"train-{number:06d}.tar"
        path.write_bytes(tar_bytes(id_samples(first, count)))
        paths.append(str(path))
        first += count
    return paths


def parquet_bytes(first: int, count: int, row_group_size: int = 4) -> bytes:
    """Parquet rows ``{"id", "text", "vector", "npy"}`` for ids ``first`` on, in small row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = list(range(first, first + count))
    table = pa.table(
        {
            "id": ids,
            "text": [f"row {i}" for i in ids],
            "vector": [[float(i), float(i) + 0.5] for i in ids],
            "npy": [npy_bytes(np.full(2, i, dtype=np.int32)) for i in ids],
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=row_group_size)
    return out.getvalue()


def write_parquet_shards(folder: Path, counts: Sequence[int]) -> list[str]:
    """Parquet shards ``part-000000.parquet``... in ``folder``; ids run on across shards."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, first = [], 0
    for number, count in enumerate(counts):
        path = folder / f"part-{number:06d}.parquet"
        path.write_bytes(parquet_bytes(first, count))
        paths.append(str(path))
        first += count
    return paths


def write_indexed_tar_shards(folder: Path, counts: Sequence[int]) -> list[str]:
    """:func:`write_tar_shards` plus their index beside them, as ``pack`` leaves them."""
    from loaderfactory.shards import Storage, build_index, index_url, save_index

    urls = write_tar_shards(folder, counts)
    save_index(build_index(urls, Storage(), progress=False), index_url(urls), Storage())
    return urls


def sample_bytes(urls: Sequence[str]) -> int:
    """The bytes of every sample's members in the local tars ``urls``: what reading each sample once
    reads at least."""
    from loaderfactory.shards import Storage
    from loaderfactory.shards.formats.tar.shard import scan_tar

    return sum(end - start for url in urls for start, end in (s.span for s in scan_tar(Storage(), url)))
