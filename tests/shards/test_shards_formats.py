"""Tar and Parquet shards: webdataset's sample rule, decoding by extension, errors naming URL and sample."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from shards_data import id_samples, npy_bytes, parquet_bytes, tar_bytes

from loaderfactory.shards import ShardError, Storage
from loaderfactory.shards.formats.parquet import ParquetShard
from loaderfactory.shards.formats.tar.shard import TarShard, split_member_name


def _image_bytes(fmt: str) -> bytes:
    from PIL import Image

    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3) * 10
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return out.getvalue()


def _pt_bytes(value: object) -> bytes:
    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()


def _one_sample_tar(tmp_path: Path, fields: dict[str, bytes]) -> str:
    path = tmp_path / "one.tar"
    path.write_bytes(tar_bytes([{"__key__": b"dir/s0", **fields}]))
    return str(path)


def test_fields_decode_by_extension(tmp_path: Path) -> None:
    """Each known extension decodes to its type; an unknown one stays bytes."""
    fields = {
        "npy": npy_bytes(np.arange(6, dtype=np.float32).reshape(2, 3)),
        "pt": _pt_bytes({"w": torch.ones(2)}),
        "pth": _pt_bytes([1, 2]),
        "json": json.dumps({"a": [1, 2]}).encode(),
        "txt": "héllo".encode(),
        "cls": b" 7\n",
        "idx": b"12",
        "png": _image_bytes("PNG"),
        "webp": _image_bytes("WEBP"),
        "seg.bin": b"\x00\x01",
    }
    sample = TarShard(Storage(), _one_sample_tar(tmp_path, fields)).sample(0)
    assert sample["__key__"] == "dir/s0"
    assert torch.equal(sample["npy"], torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert torch.equal(sample["pt"]["w"], torch.ones(2)) and sample["pth"] == [1, 2]
    assert sample["json"] == {"a": [1, 2]} and sample["txt"] == "héllo"
    assert sample["cls"] == 7 and sample["idx"] == 12
    expected = torch.from_numpy(np.arange(18, dtype=np.uint8).reshape(2, 3, 3) * 10).permute(2, 0, 1)
    for image in ("png", "webp"):
        assert sample[image].dtype == torch.uint8 and torch.equal(sample[image], expected)
    assert sample["seg.bin"] == b"\x00\x01"


def test_jpeg_decodes_to_a_chw_uint8_tensor(tmp_path: Path) -> None:
    """A lossy ``.jpg`` still decodes to channels × height × width, uint8."""
    sample = TarShard(Storage(), _one_sample_tar(tmp_path, {"jpg": _image_bytes("JPEG")})).sample(0)
    assert sample["jpg"].shape == (3, 2, 3) and sample["jpg"].dtype == torch.uint8


@pytest.mark.parametrize(
    ("decode", "decoded"), [(False, set()), ({"json"}, {"json"}), (True, {"json", "cls"})]
)
def test_decode_chooses_extensions_or_turns_off(tmp_path: Path, decode: object, decoded: set[str]) -> None:
    """``decode=False`` keeps bytes; a collection decodes only the extensions it names."""
    url = _one_sample_tar(tmp_path, {"json": b"[1]", "cls": b"3"})
    sample = TarShard(Storage(), url, decode).sample(0)  # type: ignore[arg-type]
    assert {f for f in ("json", "cls") if not isinstance(sample[f], bytes)} == decoded


def test_a_sample_is_the_consecutive_members_sharing_a_key() -> None:
    """The key is the path up to the first dot of the file name, the field the rest (webdataset's rule)."""
    assert split_member_name("a.b/c.seg.png") == ("a.b/c", "seg.png")
    assert split_member_name("x.cls") == ("x", "cls")


def test_tar_samples_keep_order_and_ids(tmp_path: Path) -> None:
    """Every sample of a tar shard is found, in order, with its own fields."""
    path = tmp_path / "t.tar"
    path.write_bytes(tar_bytes(id_samples(5, 7)))
    shard = TarShard(Storage(), str(path))
    assert len(shard) == 7
    assert [shard.sample(i)["cls"] for i in range(7)] == list(range(5, 12))
    assert shard.sample(3)["json"] == {"id": 8} and torch.equal(shard.sample(3)["npy"], torch.full((3,), 8))


def _cut_points(data: bytes) -> dict[str, int]:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        npy = archive.getmembers()[4]  # sample 1's second member
        archive_end = archive.offset  # where the end-of-archive blocks begin
    return {
        "inside data": npy.offset_data + 10,
        "inside a header": npy.offset + 100,
        "at a member boundary": archive_end,
    }


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("inside data", r"truncated tar: member 'sample000001.npy' of sample 'sample000001' ends at byte"),
        ("inside a header", "truncated tar: no end-of-archive block after byte"),
        ("at a member boundary", "truncated tar: no end-of-archive block"),
    ],
)
def test_a_truncated_tar_is_named_with_url_and_sample(tmp_path: Path, where: str, message: str) -> None:
    """A tar cut anywhere is refused when opened, naming the URL (and the sample when one is cut)."""
    data = tar_bytes(id_samples(0, 2))
    path = tmp_path / "cut.tar"
    path.write_bytes(data[: _cut_points(data)[where]])
    with pytest.raises(ShardError, match=f"{path}: ({message})"):
        TarShard(Storage(), str(path))


def test_parquet_rows_are_samples_across_row_groups(tmp_path: Path) -> None:
    """Each row is a sample with its columns as keys; binary columns named by extension decode."""
    path = tmp_path / "p.parquet"
    path.write_bytes(parquet_bytes(10, 9))  # row groups of 4, 4, 1
    shard = ParquetShard(Storage(), str(path))
    rows = [shard.sample(i) for i in (8, 0, 5, 4)]
    assert [row["id"] for row in rows] == [18, 10, 15, 14]
    assert rows[0]["text"] == "row 18" and rows[0]["vector"] == [18.0, 18.5]
    assert torch.equal(rows[0]["npy"], torch.full((2,), 18, dtype=torch.int32))
    assert len(shard) == 9
    shard.close()


def test_a_corrupt_parquet_file_is_named(tmp_path: Path) -> None:
    """A Parquet file with a damaged footer is refused naming its URL."""
    data = parquet_bytes(0, 4)
    path = tmp_path / "bad.parquet"
    path.write_bytes(data[: len(data) // 2] + data[-4:])
    with pytest.raises(ShardError, match=f"{path}: not a readable Parquet file"):
        ParquetShard(Storage(), str(path))


def test_a_field_that_cannot_decode_names_url_sample_and_field(tmp_path: Path) -> None:
    """A ``.json`` member that is not JSON fails naming the shard, the sample and how to keep bytes."""
    url = _one_sample_tar(tmp_path, {"json": b"{not json"})
    with pytest.raises(ShardError, match=r"one\.tar: sample 'dir/s0' \(#0\), field 'json': cannot decode"):
        TarShard(Storage(), url).sample(0)
    assert TarShard(Storage(), url, decode=False).sample(0)["json"] == b"{not json"
