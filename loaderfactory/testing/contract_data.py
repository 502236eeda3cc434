"""Data for the contract tests of the kinds that read files: each function writes its files into the
folder it is given and returns the overrides that read them.

Registered with their kinds in :mod:`loaderfactory.config.builtins` (``Contract(example(...))``) and
imported only when a contract test calls one, so building a loader never loads this module. Every
function writes ``CONTRACT_LENGTH`` items with an ``index`` key among them.
"""

from __future__ import annotations

import io
import itertools
import tarfile
from pathlib import Path

import numpy as np
import torch

from loaderfactory.config.registry import CONTRACT_LENGTH


def tensor_folder_example(folder: Path) -> list[str]:
    """``tensor_folder``: dict items as ``.pt`` files in ``folder``, and its overrides."""
    for index in range(CONTRACT_LENGTH):
        item = {"image": torch.full((2,), float(index)), "label": torch.tensor(index % 3), "index": index}
        torch.save(item, folder / f"item_{index:03d}.pt")
    return ["dataset=tensor_folder", f"dataset.root={folder}"]


def mixture_example(folder: Path) -> list[str]:
    """``mixture``: two ``tensor_folder`` sources, ids 0-4 and 5-9, mixed 1:1 until both are read."""
    half = CONTRACT_LENGTH // 2
    for name, ids in (("low", range(half)), ("high", range(half, CONTRACT_LENGTH))):
        (folder / name).mkdir(exist_ok=True)  # the tests may write a contract twice
        for index in ids:
            item = {"image": torch.full((2,), float(index)), "index": index}
            torch.save(item, folder / name / f"item_{index:03d}.pt")
    sources = ",".join(
        f"{name}:{{dataset:{{kind:tensor_folder,root:'{folder / name}'}},weight:1}}"
        for name in ("low", "high")
    )
    return [
        "dataset=mixture",
        f"dataset.sources={{{sources}}}",
    ]


def tensor_folder_npy_example(folder: Path) -> list[str]:
    """``tensor_folder``: one ``.npy`` array per item, read as the item ``{"index": tensor(index)}``."""
    for index in range(CONTRACT_LENGTH):
        np.save(folder / f"item_{index:03d}.npy", np.array(index))
    return [
        "dataset=tensor_folder",
        f"dataset.root={folder}",
        "dataset.pattern=*.npy",
        "dataset.array_key=index",
    ]


def shards_tar_example(folder: Path) -> list[str]:
    """``shards``: samples in 3 tar shards; ``index`` holds the id's digits (a field without a decoder
    stays bytes), ``npy`` a tensor of it."""
    bounds = np.linspace(0, CONTRACT_LENGTH, 4).astype(int)
    for number, (first, end) in enumerate(itertools.pairwise(bounds)):
        with tarfile.open(folder / f"train-{number:03d}.tar", "w", format=tarfile.USTAR_FORMAT) as archive:
            for index in range(first, end):
                _member(archive, f"s{index:04d}.index", str(index).encode())
                _member(archive, f"s{index:04d}.npy", _npy(index))
    return ["dataset=shards", f"dataset.urls='{folder}/train-{{000..002}}.tar'"]


def shards_parquet_example(folder: Path) -> list[str]:
    """``shards``: rows in 2 Parquet shards, columns ``index`` and ``vector``."""
    import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type stubs
    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no type stubs

    half = CONTRACT_LENGTH // 2
    for number, ids in enumerate((range(half), range(half, CONTRACT_LENGTH))):
        table = pa.table({"index": list(ids), "vector": [[float(i), -float(i)] for i in ids]})
        pq.write_table(table, folder / f"part-{number}.parquet", row_group_size=8)
    return ["dataset=shards", f"dataset.urls={folder}/", "dataset.shuffle_window=2"]


def _member(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def _npy(value: int) -> bytes:
    out = io.BytesIO()
    np.save(out, np.full(2, value, dtype=np.float32), allow_pickle=False)
    return out.getvalue()
