"""``pack`` → ``shards``: each item reads back as it was packed (a dict with its keys in order, a
tuple, a list, a single value; numpy arrays as tensors), tar and Parquet, local and S3, 0 and 2
workers, one by one and in batches; ``fields: raw`` and ``metadata`` on request; shards written
elsewhere, and indexes without the layout record, keep the webdataset reading."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from packed_items import assert_same, expected_item
from s3_server import S3Server
from shards_data import write_tar_shards
from torch.utils.data import Dataset, default_collate

import loaderfactory
from loaderfactory.builders.shards import index_shards
from loaderfactory.components.data.stacked import StackedItems
from loaderfactory.components.data.stacked import default_collate as stacked_collate
from loaderfactory.errors import ConfigError
from loaderfactory.shards import INDEX_NAME, PackError, ShardError, ShardsDataset, pack

HERE = __name__
FORMATS = ["tar", "parquet"]
LENGTH = 19


def _dict_item(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "image": torch.arange(12, dtype=torch.float32).reshape(3, 4) + i,  # fixed size: read stacked
        "mask": torch.tensor([i % 2 == 0, True]),
        "half": torch.full((2,), i, dtype=torch.float16),
        "brain": torch.full((2,), i / 4, dtype=torch.bfloat16),  # no numpy dtype: .pt
        "counts": np.arange(i % 3 + 1, dtype=np.int16) + i,  # numpy: back as a tensor
        "scalar": np.float64(i) / 3,  # a numpy scalar: back as a 0-d tensor
        "score": i / 7,
        "name": f"item {i} · ünïcode",
        "raw": bytes([i, 0, 255]),
        "meta": {"tags": ["a", str(i)], "deep": {"weight": 0.5, "none": None}},
        "boxes": [torch.ones(2) * i, {"n": i}],
    }


def _tuple_item(i: int) -> tuple[Any, ...]:
    return (torch.full((4,), float(i)), i, f"t{i}", np.arange(3, dtype=np.uint8) * i, {"k": [i]}, b"%d" % i)


SHARD_SIZES = {"dict": (65536, 20000), "tuple": (28672, 6000), "list": (28672, 6000), "value": (8192, 4700)}
"""Per structure, the tar and the Parquet shard size that give shards of 3 to 7 items."""
STRUCTURES = {
    "dict": (_dict_item, lambda item: item["id"]),
    "tuple": (_tuple_item, lambda item: item[1]),
    "list": (lambda i: list(_tuple_item(i)), lambda item: item[1]),
    "value": (lambda i: torch.full((3,), i, dtype=torch.int64), lambda item: int(item[0])),
}


class Items(Dataset[Any]):
    """``LENGTH`` items of one structure (``STRUCTURES``), each a function of its id."""

    def __init__(self, structure: str) -> None:
        self.make = STRUCTURES[structure][0]

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, i: int) -> Any:
        return self.make(i)


def _pack(structure: str, out: str, fmt: str, **options: Any) -> str:
    """``Items(structure)`` packed at ``out`` into shards of several items each; ``out``."""
    size = SHARD_SIZES[structure][FORMATS.index(fmt)]
    result = pack(Items(structure), out, shard_size=size, format=fmt, progress=False, **options)
    assert 2 < len(result.shards) < LENGTH / 2
    return out


def keep(items: Any) -> Any:
    """A collate that keeps what it gets (torch's default would turn a tuple item into a list)."""
    return items


def _read_items(urls: str, workers: int, batch_size: int | None = None, **dataset: Any) -> list[Any]:
    """Every item of the shards at ``urls``, shuffled, through ``build_loader``: unbatched, or read
    in batches (``__getitems__``) kept as lists of items."""
    loader = {
        "kind": "torch",
        "batch_size": batch_size,
        "num_workers": workers,
        "shuffle": True,
        "collate": {"_target_": f"{HERE}.keep", "_partial_": True},
    }
    config = {"dataset": {"kind": "shards", "urls": urls, **dataset}, "loader": loader, "seed": 4}
    with loaderfactory.build_loader(config) as read:
        return list(read) if batch_size is None else [item for batch in read for item in batch]


def _check_items(items: list[Any], structure: str) -> None:
    """Each id once, each item as packed."""
    make, id_of = STRUCTURES[structure]
    ids = Counter(id_of(item) for item in items)
    assert ids == Counter(range(LENGTH)), ids
    for item in items:
        assert_same(item, expected_item(make(id_of(item))), f"item {id_of(item)}")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("structure", "workers"),
    [("dict", 0), ("dict", 2), ("tuple", 0), ("tuple", 2), ("list", 0), ("value", 0)],
)
def test_local_shards_give_back_each_item_as_packed(
    tmp_path: Path, fmt: str, structure: str, workers: int
) -> None:
    """Dict, tuple, list and single-value items packed locally read back equal, of the same types."""
    out = _pack(structure, str(tmp_path / "out"), fmt)
    _check_items(_read_items(out, workers), structure)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("fmt", FORMATS)
def test_s3_shards_give_back_each_item_as_packed(
    s3: S3Server, fsspec_io_thread: None, fmt: str, workers: int
) -> None:
    """Dict and tuple items packed to S3 read back equal, each id once."""
    for structure in ("dict", "tuple"):
        out = s3.url(f"round-trip/{fmt}-{workers}-{structure}/")
        _pack(structure, out, fmt, storage_options=s3.storage_options)
        _check_items(_read_items(out, workers, storage_options=s3.storage_options), structure)


@pytest.mark.parametrize("structure", ["dict", "tuple"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_batch_read_gives_the_items_one_by_one_reads_give(tmp_path: Path, fmt: str, structure: str) -> None:
    """``__getitems__`` (runs across shard boundaries, the stacked tar read among them) gives
    exactly the items ``dataset[i]`` gives, which are the items packed."""
    dataset = ShardsDataset(_pack(structure, str(tmp_path / "out"), fmt))
    make = STRUCTURES[structure][0]
    for indices in (list(range(LENGTH)), [7, 8, 9, 2, 3, 18, 0], [5]):
        batch = dataset.__getitems__(indices)
        assert len(batch) == len(indices)
        for i, item in zip(indices, batch, strict=True):
            assert_same(item, dataset[i], f"item {i}")
            assert_same(item, expected_item(make(i)), f"item {i}")
    dataset.close()


def _pack_plain(out: str) -> str:
    """``LENGTH`` dict items that torch's default collate takes (fixed-size tensors, ints, str)."""
    items = [{"id": i, "image": torch.full((3, 4), float(i)), "label": f"c{i % 3}"} for i in range(LENGTH)]
    pack(items, out, shard_size="8KiB", progress=False)
    return out


def test_the_stacked_tar_read_hands_its_batch_tensors_to_collate_under_the_items_keys(tmp_path: Path) -> None:
    """Fixed-size tensors of a local tar run land in one batch tensor, named by the item's key;
    the default collate hands that tensor over and gives the batch torch would."""
    dataset = ShardsDataset(_pack_plain(str(tmp_path / "out")))
    batch = dataset.__getitems__(list(range(8)))
    assert isinstance(batch, StackedItems) and "image" in batch.stacked
    stacked = batch.stacked["image"]
    collated = stacked_collate(batch)
    assert collated["image"] is stacked
    expected = default_collate([dataset[i] for i in range(8)])
    assert list(collated) == list(expected) and torch.equal(collated["image"], expected["image"])
    dataset.close()


def test_the_stacked_tar_read_of_tuple_items_hands_its_batch_tensors_to_collate_by_position(
    tmp_path: Path,
) -> None:
    """Tuple items read stacked: the default collate hands over the batch tensor at the tensor's
    position and gives the list torch would (it turns a batch of tuples into a list)."""
    dataset = ShardsDataset(_pack("tuple", str(tmp_path / "out"), "tar"))
    batch = dataset.__getitems__(list(range(8)))
    assert isinstance(batch, StackedItems) and set(batch.stacked) == {0, 3}
    stacked = batch.stacked[0]
    collated = stacked_collate(batch)
    expected = default_collate([expected_item(_tuple_item(i)) for i in range(8)])
    assert type(collated) is list and collated[0] is stacked
    assert_same(collated, expected, "batch")
    dataset.close()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("structure", ["dict", "tuple"])
def test_batches_read_in_workers_hold_the_items_as_packed(
    tmp_path: Path, structure: str, fmt: str, workers: int
) -> None:
    """Batches of 4 read by ``__getitems__`` (in two workers too) hold each item as packed, each id once."""
    out = _pack(structure, str(tmp_path / "out"), fmt)
    _check_items(_read_items(out, workers, batch_size=4), structure)


def test_a_resumed_epoch_reads_the_rest_of_the_items(tmp_path: Path) -> None:
    """Resumed after two batches, the shuffled epoch gives the items the run had left, as packed."""
    out = _pack_plain(str(tmp_path / "out"))
    config = {
        "dataset": {"kind": "shards", "urls": out},
        "loader": {"kind": "torch", "batch_size": 3, "shuffle": True},
        "seed": 5,
    }
    with loaderfactory.build_loader(config) as loader:
        batches = iter(loader)
        first = [int(i) for _ in range(2) for i in next(batches)["id"]]
        state = loader.state_dict()
        rest = [int(i) for batch in batches for i in batch["id"]]
    with loaderfactory.build_loader(config) as loader:
        loader.load_state_dict(state)
        resumed = [batch for batch in loader]
    assert [int(i) for batch in resumed for i in batch["id"]] == rest
    assert Counter(first + rest) == Counter(range(LENGTH))
    assert list(resumed[0]) == ["id", "image", "label"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_fields_raw_gives_the_stored_fields_with_key_and_url(tmp_path: Path, fmt: str) -> None:
    """``fields: raw`` reads packed shards as webdataset does: stored names, ``__key__``, ``__url__``."""
    out = _pack("dict", str(tmp_path / "out"), fmt)
    (sample,) = [s for s in _read_items(out, 0, fields="raw") if s["id.cls"] == 3]
    names = [name for name in sample if name[:2] != "__"]
    assert names == ["id.cls", "image.npy", "mask.npy", "half.npy", "brain.pt", "counts.npy", "scalar.npy",
                     "score.json", "name.txt", "raw.bin", "meta.json", "boxes.pt"]  # fmt: skip
    assert sample["__key__"] == "000003" and sample["__url__"].startswith(out)
    assert torch.equal(sample["image.npy"], _dict_item(3)["image"])


def test_metadata_adds_key_and_url_to_dict_items(tmp_path: Path) -> None:
    """``metadata: true`` adds ``__key__`` and ``__url__`` after the item's own keys."""
    out = _pack("dict", str(tmp_path / "out"), "tar")
    items = _read_items(out, 0, metadata=True)
    for item in items:
        assert list(item) == [*_dict_item(0), "__key__", "__url__"]
        assert item["__key__"] == f"{item['id']:06d}" and item["__url__"].startswith(f"{out}/shard-")


@pytest.mark.parametrize("structure", ["tuple", "value"])
def test_metadata_on_items_without_keys_is_refused_at_its_path(tmp_path: Path, structure: str) -> None:
    """Tuple and single-value items have no place for ``__key__``: ``metadata: true`` is refused,
    naming the field and what to do."""
    out = _pack(structure, str(tmp_path / "out"), "tar")
    with pytest.raises(ConfigError, match=r"dataset\.metadata: these shards hold .*set metadata: false"):
        _read_items(out, 0, metadata=True)
    with pytest.raises(ConfigError, match=r"dataset\.keys: keys name the keys of dict items"):
        _read_items(out, 0, keys=["0"])


def test_keys_are_the_items_keys_and_a_missing_one_names_the_sample(tmp_path: Path) -> None:
    """``keys`` name item keys of packed shards (stored names only with ``fields: raw``); an item
    lacking one is an error naming the shard's URL and the sample, one by one and in a batch."""
    items = [{"id": i, "label": i} if i != 5 else {"id": i} for i in range(8)]
    out = str(tmp_path / "out")
    pack(items, out, progress=False)
    dataset = ShardsDataset(out, keys=["id", "label"])
    assert dataset[4] == {"id": 4, "label": 4}
    message = (
        r"shard-000000\.tar: sample '000005' \(#5 in the shard, #5 overall\) has no 'label'; it has \['id'\]"
    )
    with pytest.raises(ShardError, match=message):
        dataset[5]
    with pytest.raises(ShardError, match=message):
        dataset.__getitems__(list(range(8)))
    assert ShardsDataset(out, keys=["label.cls"], fields="raw")[4]["label.cls"] == 4
    with pytest.raises(
        ConfigError, match=r"dataset\.keys: no packed item has 'label\.cls'.*item's key 'label'"
    ):
        _read_items(out, 0, keys=["label.cls"])


@pytest.mark.parametrize("fields", ["item", "raw"])
def test_shards_written_elsewhere_keep_the_webdataset_reading(tmp_path: Path, fields: str) -> None:
    """A hand-written tar (no layout in its index) reads as webdataset does, whatever ``fields``."""
    write_tar_shards(tmp_path / "data", [3, 4])
    samples = _read_items(f"{tmp_path / 'data'}/", 0, fields=fields)
    assert Counter(s["cls"] for s in samples) == Counter(range(7))
    for sample in samples:
        assert list(sample) == ["__key__", "cls", "npy", "json", "__url__"]
        assert sample["__key__"] == f"sample{sample['cls']:06d}"


def test_an_index_without_the_layout_record_reads_as_before(tmp_path: Path) -> None:
    """Packed shards whose index lacks ``items`` (written before the record) read raw, exactly as
    ``fields: raw`` reads them with it."""
    out = _pack("dict", str(tmp_path / "out"), "tar")
    raw = ShardsDataset(out, fields="raw")
    expected = [raw[i] for i in range(LENGTH)]
    index = Path(out) / INDEX_NAME
    data = json.loads(index.read_text())
    del data["items"]
    index.write_text(json.dumps(data))
    old = ShardsDataset(out)
    for i in range(LENGTH):
        assert_same(old[i], expected[i], f"sample {i}")
    assert_same(old.__getitems__(list(range(LENGTH))), expected, "batch")


@pytest.mark.parametrize(
    ("items", "record"),
    [
        ([{"x": 1, "y": "a"}], {"type": "dict", "fields": {"x": "x.cls", "y": "y.txt"}}),
        ([(1, 2.5)], {"type": "tuple", "fields": ["0.cls", "1.json"]}),
        ([[b"a"]], {"type": "list", "fields": ["0.bin"]}),
        ([torch.ones(1)], {"type": "value", "fields": ["item.npy"]}),
        (
            [{"x": 1}, {"x": 1.5, "z": None}],
            {"type": "dict", "fields": {"x": ["x.cls", "x.json"], "z": "z.json"}},
        ),
    ],
)
def test_the_index_records_the_items_layout(tmp_path: Path, items: list[Any], record: dict[str, Any]) -> None:
    """The index's ``items`` record: the type, and each key's stored names (several when they vary);
    the items read back as packed."""
    result = pack(items, str(tmp_path / "out"), progress=False)
    assert json.loads(Path(result.index).read_text())["items"] == record
    dataset = ShardsDataset(str(tmp_path / "out"))
    for i, item in enumerate(items):
        assert_same(dataset[i], item, f"item {i}")


def test_items_of_another_structure_than_the_first_are_refused(tmp_path: Path) -> None:
    """The reader gives every item back in one structure: a tuple among dicts stops the pack."""
    with pytest.raises(
        PackError, match=r"item 2 is a tuple item but item 0 is a dict item; .*make every item a dict"
    ):
        pack([{"x": 1}, {"x": 2}, (3,)], str(tmp_path / "out"), progress=False)
    assert not (tmp_path / "out" / INDEX_NAME).exists()


def test_indexing_packed_shards_again_keeps_their_layout(tmp_path: Path) -> None:
    """``run.mode=index`` over packed shards (copied elsewhere, say) keeps the items' layout."""
    out = _pack("tuple", str(tmp_path / "out"), "tar")
    before = json.loads((Path(out) / INDEX_NAME).read_text())["items"]
    spec = loaderfactory.validate({"dataset": {"kind": "shards", "urls": f"{out}/"}}).dataset
    index_shards(spec, progress=False)
    assert json.loads((Path(out) / INDEX_NAME).read_text())["items"] == before
    assert_same(ShardsDataset(out)[3], expected_item(_tuple_item(3)))


def test_a_malformed_layout_record_names_the_index(tmp_path: Path) -> None:
    """An ``items`` record that is not a layout is an error naming the index and the record."""
    out = _pack("value", str(tmp_path / "out"), "tar")
    index = Path(out) / INDEX_NAME
    data = json.loads(index.read_text())
    data["items"] = {"type": "set", "fields": []}
    index.write_text(json.dumps(data))
    with pytest.raises(
        ShardError, match=rf"{INDEX_NAME}: items = .*'set'.*needs 'type' \(one of dict, tuple"
    ):
        ShardsDataset(out)


def test_a_reading_that_is_neither_item_nor_raw_is_refused_at_its_path() -> None:
    """``fields`` takes ``item`` or ``raw``; anything else is named with the values allowed."""
    with pytest.raises(ConfigError, match=r"dataset\.fields: must be one of 'item' or 'raw', got 'rows'"):
        loaderfactory.validate({"dataset": {"kind": "shards", "urls": "a.tar", "fields": "rows"}})


def test_the_round_trip_guide_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/shards/round-trip.md's example packs dict items and reads one back as packed, and raw."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "shards" / "round-trip.md").read_text()
    code = guide.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/shards/round-trip.md", "exec"), namespace)
    item, raw = namespace["item"], namespace["raw"]
    assert list(item) == ["image", "label"] and item["label"] == 7 and item["image"].shape == (3, 32, 32)
    assert list(raw) == ["__key__", "image.npy", "label.cls", "__url__"] and raw["__key__"] == "000007"
