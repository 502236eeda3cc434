"""``pack``: any dataset written as shards reads back exactly through ``ShardsDataset``, cut at
``shard_size``, written whole or not at all; and ``run.mode=pack`` on the command line."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from cli_forks import run_command
from packed_items import assert_same, expected_item
from s3_server import S3Server
from shards_data import parquet_bytes, write_tar_shards
from torch.utils.data import Dataset, IterableDataset

import loaderfactory
from loaderfactory.components.data.datasets import SyntheticDataset
from loaderfactory.errors import ArgumentError
from loaderfactory.shards import INDEX_NAME, PackError, ShardsDataset, Storage, load_index, pack

pytestmark = pytest.mark.usefixtures("cli_forks")  # command runs fork from one interpreter

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ["tar", "parquet"]


def _synthetic(length: int = 30) -> SyntheticDataset:
    """Small tensors of three dtypes, plus the ``index`` int the ids are counted by."""
    fields = {
        "image": {"shape": [2, 5], "dtype": "float32"},
        "label": {"shape": [], "dtype": "int64"},
        "mask": {"shape": [3], "dtype": "bool"},
    }
    return SyntheticDataset(length=length, fields=fields, seed=3)


class MixedDataset(Dataset[dict[str, Any]]):
    """Items with every kind of value ``pack`` stores, each depending on the item's id."""

    def __len__(self) -> int:
        return 23

    def __getitem__(self, i: int) -> dict[str, Any]:
        grid = torch.arange(12, dtype=torch.int16).reshape(3, 4) + i
        return {
            "id": i,
            "view": grid[:, 1:3],  # a view: only its own values are stored
            "half": torch.full((2,), i / 4, dtype=torch.bfloat16),  # no numpy dtype: .pt
            "param": torch.nn.Parameter(torch.ones(2) * i),  # a subclass needing grad: .pt
            "array": np.arange(i % 4 + 1, dtype=np.uint8) * i,
            "scalar": np.float64(i) / 3,
            "score": i / 7,
            "text": f"item {i} · ünïcode",
            "raw": bytes([i, 0, 255]),
            "meta": {"tags": ["a", str(i)], "weight": 0.5, "none": None, "flag": i % 2 == 0},
            "pair": (i, f"{i}"),
            "tensors": {"a": torch.ones(2) * i, "b": [torch.zeros(1, dtype=torch.int64)]},
        }


def _check_read_back(dataset: Any, out: str, storage_options: dict[str, Any] | None = None) -> None:
    """Every item once, in order, under its zero-padded key, with equal values of the same types."""
    shards = ShardsDataset(out, storage_options=storage_options, metadata=True)
    assert len(shards) == len(dataset)
    ids = Counter()
    for i in range(len(shards)):
        sample, item = shards[i], dataset[i]
        assert sample.pop("__key__") == f"{i:06d}" and sample.pop("__url__").startswith(out)
        ids[sample["id" if "id" in item else "index"]] += 1
        assert list(sample) == list(item)
        for key, value in item.items():
            assert_same(sample[key], expected_item(value), f"item {i}, {key}")
    assert ids == Counter(range(len(dataset)))


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("make", [_synthetic, MixedDataset], ids=["synthetic", "mixed"])
def test_items_read_back_exactly_from_a_local_folder(
    tmp_path: Path, make: Any, fmt: str, num_workers: int
) -> None:
    """Synthetic and mixed-type items packed in several shards read back equal, each id once."""
    dataset = make()
    result = pack(
        dataset, str(tmp_path / "out"), shard_size=2048, format=fmt, num_workers=num_workers, progress=False
    )
    assert len(result.shards) > 1 and result.samples == len(dataset)
    assert [Path(s.url).name for s in result.shards][:2] == [f"shard-000000.{fmt}", f"shard-000001.{fmt}"]
    assert result.index == f"{tmp_path / 'out'}/{INDEX_NAME}"
    _check_read_back(dataset, f"{tmp_path / 'out'}/")


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("fmt", FORMATS)
def test_items_read_back_exactly_from_s3(
    s3: S3Server, fsspec_io_thread: None, fmt: str, num_workers: int
) -> None:
    """Packing to ``s3://`` writes shards and index there; both datasets read back equal."""
    for name, dataset in [("synthetic", _synthetic()), ("mixed", MixedDataset())]:
        out = s3.url(f"pack/{fmt}-{num_workers}-{name}/")
        result = pack(
            dataset,
            out,
            shard_size=4096,
            format=fmt,
            num_workers=num_workers,
            storage_options=s3.storage_options,
            progress=False,
        )
        assert result.index == f"{out}{INDEX_NAME}" and len(result.shards) > 1
        _check_read_back(dataset, out, s3.storage_options)


@pytest.mark.parametrize("fmt", FORMATS)
def test_shards_stay_within_shard_size_unless_one_item_is_bigger(tmp_path: Path, fmt: str) -> None:
    """Every shard fits ``shard_size``; an item bigger than that alone makes a shard of its own."""
    sizes = [100, 3000, 50, 20000, 700, 700, 700, 5, 2500, 1200, 30000, 10, 10]
    random = np.random.default_rng(0)  # incompressible, so Parquet's sizes are the blobs' too
    items = [{"id": i, "blob": random.bytes(size)} for i, size in enumerate(sizes)]
    limit = 8192
    result = pack(items, str(tmp_path), shard_size="8KiB", format=fmt, progress=False)
    index = {info.url: info for info in load_index(result.index, Storage())}
    assert sum(info.samples for info in index.values()) == len(items)
    for info in result.shards:
        assert info.bytes == os.path.getsize(info.url) == index[info.url].bytes
        assert info.bytes <= limit or info.samples == 1, info
    alone = [info for info in result.shards if info.bytes > limit]
    assert len(alone) == 2  # the 20000- and 30000-byte items
    assert len(result.shards) < len(items)  # the small ones share shards
    _check_read_back(items, str(tmp_path))


class FailingDataset(Dataset[dict[str, Any]]):
    """Items of about 1 KiB; item ``bad`` raises."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i == self.bad:
            raise OSError(f"cannot read record {i}")
        return {"id": i, "blob": bytes(1000)}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failing_item_is_named_and_leaves_no_partial_file(
    tmp_path: Path, fmt: str, num_workers: int
) -> None:
    """An item that raises stops packing with its index; shards written before it are whole, no
    temporary file and no index are left."""
    out = tmp_path / "out"
    with pytest.raises(PackError, match=r"item 31: the dataset raised OSError: cannot read record 31"):
        pack(
            FailingDataset(bad=31),
            str(out),
            shard_size=8192,
            format=fmt,
            num_workers=num_workers,
            progress=False,
        )
    names = sorted(p.name for p in out.iterdir())
    shards = [n for n in names if n.startswith("shard-") and n.endswith(f".{fmt}")]
    tables = [f"{n}.members.npz" for n in shards] if fmt == "tar" else []  # a tar shard's member table
    assert shards and sorted(shards + tables) == names, names
    written = ShardsDataset(str(out))  # no index: the shards are read whole, so each must be complete
    assert [written[i]["id.cls"] for i in range(len(written))] == list(range(len(written)))
    assert 0 < len(written) < 31


def test_a_failing_write_removes_its_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails halfway (a full disk) leaves neither the temporary file nor a shard."""
    real = Path.write_bytes

    def half_then_full(path: Path, data: bytes) -> int:
        real(path, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", half_then_full)
    with pytest.raises(OSError, match="No space left"):
        pack(_synthetic(), str(tmp_path / "out"), progress=False)
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"img": object()}, r"item 0, field 'img': img: cannot store a object"),
        (
            {"meta": {"a": np.zeros(2)}},
            r"item 0, field 'meta': meta\.a: cannot store a ndarray .* make them tensors",
        ),
        ({"meta": {"w": 1, "tags": {"x", "y"}}}, r"item 0, field 'meta': meta\.tags: cannot store a set"),
        (
            {"boxes": [[1, 2], (3, {4: range(2)})]},
            r"field 'boxes': boxes\[1\]\[1\]\[4\]: cannot store a range",
        ),
        (
            {"meta": {"ok": [1], (2, object()): 3}},
            r"field 'meta': meta \(the key \(2, <object .*\)\): cannot store a tuple",
        ),
        ({"names": np.array(["a", "b"])}, r"item 0, field 'names': a numpy array of dtype <U1 cannot be"),
        ({1: 2}, r"item 0: key 1 is a int; name the item's fields by str"),
        ({"__key__": 2}, r"item 0, field '__key__': a field name must be non-empty, without '/'"),
        ({"a/b": 2}, r"item 0, field 'a/b'"),
    ],
)
def test_values_that_cannot_read_back_equal_are_refused_naming_item_and_field(
    tmp_path: Path, item: dict[Any, Any], message: str
) -> None:
    """What the reader could not give back equal is refused before anything is written."""
    with pytest.raises(PackError, match=message):
        pack([item], str(tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()


def test_parquet_needs_the_same_fields_in_every_item(tmp_path: Path) -> None:
    """Parquet columns are shared by all rows: an item with other fields is refused, naming both."""
    items = [{"id": 0, "a": 1}, {"id": 1, "b": "x"}]
    with pytest.raises(PackError, match=r"item 1: fields \['id.cls', 'b.txt'\] differ from item 0's"):
        pack(items, str(tmp_path), format="parquet", progress=False)
    result = pack(items, str(tmp_path / "tar"), format="tar", progress=False)  # a tar takes them
    assert result.samples == 2


def test_tuples_and_plain_items_become_numbered_and_item_fields(tmp_path: Path) -> None:
    """A tuple item gives fields ``0``, ``1``...; any other non-dict item the field ``item``."""
    pack([(torch.ones(2), 7)], str(tmp_path / "t"), progress=False)
    pack([torch.arange(3)], str(tmp_path / "p"), progress=False)
    sample = ShardsDataset(str(tmp_path / "t"), fields="raw")[0]
    assert torch.equal(sample["0.npy"], torch.ones(2)) and sample["1.cls"] == 7
    assert torch.equal(ShardsDataset(str(tmp_path / "p"), fields="raw")[0]["item.npy"], torch.arange(3))


class Counting(IterableDataset[dict[str, int]]):
    def __iter__(self) -> Iterator[dict[str, int]]:
        return ({"id": i} for i in range(12))


def test_an_iterable_is_packed_in_this_process(tmp_path: Path) -> None:
    """An iterable dataset packs with num_workers=0 (keys count from 0); workers are refused."""
    result = pack(Counting(), str(tmp_path / "a"), progress=False)
    read = ShardsDataset(result.index.rsplit("/", 1)[0], metadata=True)
    assert [read[i]["__key__"] for i in (0, 11)] == [
        "000000000",
        "000000011",
    ]
    with pytest.raises(ArgumentError, match="num_workers must be 0 for an iterable dataset"):
        pack(Counting(), str(tmp_path / "b"), num_workers=2, progress=False)


def test_a_folder_that_holds_shards_and_bad_arguments_are_refused(tmp_path: Path) -> None:
    """Old shards would mix with new ones: refused, as are an unknown format and a bad size."""
    pack(_synthetic(4), str(tmp_path), progress=False)
    with pytest.raises(
        ArgumentError, match=r"already holds shards \(loaderfactory-shards.json, shard-000000"
    ):
        pack(_synthetic(4), str(tmp_path), progress=False)
    with pytest.raises(ArgumentError, match="format must be one of tar, parquet, got 'zip'"):
        pack(_synthetic(4), str(tmp_path / "x"), format="zip")
    with pytest.raises(ArgumentError, match="shard_size must be a size like '256MiB'"):
        pack(_synthetic(4), str(tmp_path / "x"), shard_size="lots")
    assert loaderfactory.pack is pack


def _ten_webdataset_shards(out: Path) -> str:
    write_tar_shards(out, [1] * 10)
    return r"train-000000\.tar, train-000001\.tar, train-000002\.tar, \.\.\. \(10 files\)"


def _parquet_in_a_subfolder(out: Path) -> str:
    (out / "old").mkdir(parents=True)
    (out / "old" / "part-0.parquet").write_bytes(parquet_bytes(0, 4))
    (out / "notes.txt").write_text("not a shard")
    return r"old/part-0\.parquet"


@pytest.mark.parametrize("holding", [_ten_webdataset_shards, _parquet_in_a_subfolder])
def test_a_folder_holding_shards_of_any_name_is_refused_and_left_alone(tmp_path: Path, holding: Any) -> None:
    """Shards not named like pack's own (``train-*.tar``), or in a subfolder: a reader of the
    folder lists them beside the packed ones (22 samples for 12 items), so pack refuses, naming the
    folder and the files, and writes nothing."""
    out = tmp_path / "out"
    shown = holding(out)
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    message = rf"the folder {re.escape(str(out))}/ already holds shards \({shown}\); .*: delete them"
    with pytest.raises(ArgumentError, match=message):
        pack(_synthetic(12), str(out), progress=False)
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


def test_a_folder_holding_other_files_only_is_packed_into(tmp_path: Path) -> None:
    """Files that are no shards stay beside the new ones; the folder reads back every item once."""
    (tmp_path / "notes.txt").write_text("not a shard")
    pack(_synthetic(12), str(tmp_path), shard_size=300, progress=False)
    shards = ShardsDataset(f"{tmp_path}/")
    assert sorted(int(shards[i]["index"]) for i in range(len(shards))) == list(range(12))


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_command(tmp_path, *args, f"hydra.run.dir={tmp_path / 'run'}")


def test_the_command_packs_a_preset_and_says_what_it_wrote(tmp_path: Path) -> None:
    """``run.mode=pack`` writes the synthetic preset as shards with workers, prints the figures, exits 0."""
    out = tmp_path / "shards"
    result = _cli(
        tmp_path,
        "run.mode=pack",
        "run.progress=false",
        "dataset.length=50",
        f"pack.out={out}",
        "pack.shard_size=64KiB",
        "pack.num_workers=2",
    )
    assert result.returncode == 0, result.stderr
    shards = ShardsDataset(str(out))
    written = len(list(out.glob("shard-*.tar")))
    assert f"wrote {written} shard(s), 50 samples" in result.stdout + result.stderr and written > 1
    assert Counter(shards[i]["index"] for i in range(50)) == Counter(range(50))
    assert torch.equal(shards[7]["image"], SyntheticDataset(length=50)[7]["image"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], r"pack.out: run.mode=pack needs pack.out"),
        (["pack.out=OUT", "pack.shard_size=12XB"], r"pack.shard_size: .*'12XB' is not a size"),
        (["pack.out=OUT", "pack.format=zip"], r"pack.format: "),
        (["pack.out=FULL"], r"pack.out: the folder .* already holds shards"),
        (["pack.out=MIXED"], r"pack.out: the folder .*mixed/ already holds shards \(train-000000\.tar, "),
    ],
)
def test_the_command_refuses_bad_pack_fields_with_status_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """A missing or bad ``pack`` field exits 2 naming it."""
    pack(_synthetic(3), str(tmp_path / "full"), progress=False)
    write_tar_shards(tmp_path / "mixed", [2, 2])
    where = {"OUT": "new", "FULL": "full", "MIXED": "mixed"}
    for name, folder in where.items():
        args = [a.replace(name, str(tmp_path / folder)) for a in args]
    result = _cli(tmp_path, "run.mode=pack", "run.progress=false", *args)
    assert result.returncode == 2, result.stderr
    assert re.search(message, result.stderr), result.stderr
