"""The quick read path of tar shards: a header walk agreeing with ``tarfile``, ``.npy`` without np.load."""

from __future__ import annotations

import io
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from shards_data import npy_bytes

from loaderfactory.shards import Storage
from loaderfactory.shards.formats.decode import decode_field
from loaderfactory.shards.formats.npy import npy_array
from loaderfactory.shards.formats.tar.blocks import header_blocks
from loaderfactory.shards.formats.tar.headers import walk_canonical, walk_dense, walk_headers
from loaderfactory.shards.formats.tar.samples import group_members
from loaderfactory.shards.formats.tar.shard import TarShard, _scan_by_the_rules, scan_tar, split_member_name
from loaderfactory.shards.formats.tar.table import TarTable


def _tar(members: list[tuple[str, bytes | None]], tar_format: int) -> bytes:
    """A tar of ``(name, data)`` members (``None``: a directory) in ``tar_format``."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tar_format) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _tarfile_listing(path: Path) -> list[tuple[str, int, int]]:
    with tarfile.open(path) as archive:
        return [(m.name, m.offset_data, m.size) for m in archive if m.isfile()]


MEMBERS: list[tuple[str, bytes | None]] = [
    ("d", None),
    ("d/a.cls", b"1"),
    ("d/a.txt", b"x" * 700),
    ("d/b.cls", b""),
    ("p" * 120 + "/c.cls", b"22"),  # a ustar prefix field, or a pax/GNU long-name header
    ("é/e.txt", "ü".encode()),  # a pax header for the non-ASCII name
]


@pytest.mark.parametrize("tar_format", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_the_header_walk_lists_what_tarfile_lists(tmp_path: Path, tar_format: int) -> None:
    """Directories, empty files, prefixes, long and non-ASCII names in each tar format: the samples
    of a shard are tarfile's files, at tarfile's offsets, whether walked quickly or by tarfile."""
    members = [m for m in MEMBERS if tar_format != tarfile.USTAR_FORMAT or m[0].isascii()]
    path = tmp_path / "s.tar"
    path.write_bytes(_tar(members, tar_format))
    listing = _tarfile_listing(path)
    scanned = [
        (f"{s.key}.{f}", o, n) for s in scan_tar(Storage(), str(path)) for f, (o, n) in s.fields.items()
    ]
    assert scanned == listing
    with path.open("rb") as file:
        walked = walk_headers(file, path.stat().st_size)
    if walked is not None:  # the quick walk took it: it must agree exactly
        assert walked[0] == listing
    assert (walked is None) == (tar_format != tarfile.USTAR_FORMAT)  # long names need tarfile's rules


def test_a_bad_checksum_is_left_to_tarfile_which_names_the_shard(tmp_path: Path) -> None:
    """A corrupt header is not guessed at: tarfile reads the shard and the error names it."""
    data = bytearray(_tar([("a.cls", b"1"), ("b.cls", b"2")], tarfile.USTAR_FORMAT))
    data[1024 + 10] ^= 0xFF  # the second member's name: its checksum no longer matches
    path = tmp_path / "bad.tar"
    path.write_bytes(bytes(data))
    with path.open("rb") as file:
        assert walk_headers(file, len(data)) is None
    with pytest.raises(Exception, match=str(path)):
        scan_tar(Storage(), str(path))


def test_the_walk_over_many_members_agrees_and_refuses_a_late_bad_checksum(tmp_path: Path) -> None:
    """Past its read chunk and its batch of checksums: the walk still lists what tarfile lists, and a
    header corrupted after thousands of good ones still sends the shard to tarfile."""
    members: list[tuple[str, bytes | None]] = [
        (f"{i:05d}.{field}", bytes([i % 251]) * (i % 700)) for i in range(2100) for field in ("cls", "bin")
    ]
    data = _tar(members, tarfile.USTAR_FORMAT)
    path = tmp_path / "many.tar"
    path.write_bytes(data)
    with path.open("rb") as file:
        walked = walk_headers(file, len(data))
    assert walked is not None and walked[0] == _tarfile_listing(path)
    last_header = walked[0][-1][1] - 512
    corrupt = bytearray(data)
    corrupt[last_header + 3] ^= 0xFF  # the last member's name: its checksum no longer matches
    path.write_bytes(bytes(corrupt))
    with path.open("rb") as file:
        assert walk_headers(file, len(corrupt)) is None


ARRAYS = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    np.zeros((0, 3), np.int16),
    np.array(5, np.int64),
    np.array([True, False]),
    np.arange(10, dtype=np.uint8),
]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
@pytest.mark.parametrize(
    "wrap", [bytes, lambda b: memoryview(bytearray(b"..." + b))[3:]], ids=["bytes", "view"]
)
def test_npy_decodes_like_np_load_to_a_writable_tensor(array: np.ndarray, wrap: object) -> None:
    """Dtype, shape, values and memory order as np.load gives them; no read-only-array warning."""
    data = wrap(npy_bytes(array))  # type: ignore[operator]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tensor = decode_field("x.npy", data)
    expected = np.load(io.BytesIO(npy_bytes(array)))
    assert tensor.numpy().dtype == expected.dtype
    assert np.array_equal(tensor.numpy(), expected)
    assert tensor.numpy().flags.f_contiguous == expected.flags.f_contiguous


def test_npy_refuses_a_cut_off_array_and_leaves_objects_to_np_load() -> None:
    data = npy_bytes(np.arange(100))
    with pytest.raises(ValueError):
        npy_array(data[:-5])
    objects = io.BytesIO()
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert npy_array(objects.getvalue()) is None
    with pytest.raises(ValueError, match="pickle"):
        decode_field("x.npy", objects.getvalue())


def test_samples_read_from_a_kept_file_are_independent(tmp_path: Path) -> None:
    """Changing one sample's tensor changes no other read of it; the file closes with the shard."""
    path = tmp_path / "s.tar"
    samples = [(f"{i:03d}.npy", npy_bytes(np.full(4, i, np.int32))) for i in range(5)]
    path.write_bytes(_tar(list(samples), tarfile.USTAR_FORMAT))
    shard = TarShard(Storage(), str(path))
    first = shard.sample(2)["npy"]
    first += 100
    assert torch.equal(shard.sample(2)["npy"], torch.full((4,), 2, dtype=torch.int32))
    assert [int(shard.sample(i)["npy"][0]) for i in range(5)] == list(range(5))
    closer = shard._closer
    assert closer is not None and closer.alive
    del shard
    assert not closer.alive


def test_a_member_holding_a_tar_does_not_mislead_the_dense_walk(tmp_path: Path) -> None:
    """A small member whose data is itself a tar has the ``ustar`` magic where a header would: the
    walk that takes every such block for a header sees its chain break and walks header by header."""
    inner = _tar([("x.cls", b"7")], tarfile.USTAR_FORMAT)
    members: list[tuple[str, bytes | None]] = [
        (f"{i:03d}.{f}", inner) for i in range(40) for f in ("a.tar", "cls")
    ]
    data = _tar(members, tarfile.USTAR_FORMAT)
    path = tmp_path / "nested.tar"
    path.write_bytes(data)
    with path.open("rb") as file:
        assert walk_dense(file, len(data)) is None
        walked = walk_headers(file, len(data))
    assert walked is not None and walked[0] == _tarfile_listing(path)
    table = scan_tar(Storage(), str(path))
    assert len(table) == 40 and table[3].key == "003" and set(table[3].fields) == {"a.tar", "cls"}


def test_the_dense_walk_agrees_with_the_walk_header_by_header(tmp_path: Path) -> None:
    """Many small members, directories among them: the same files, offsets, sizes and end."""
    members: list[tuple[str, bytes | None]] = [("d", None)]
    members += [(f"d/{i:05d}.{f}", bytes([i % 251]) * (i % 900)) for i in range(600) for f in ("bin", "cls")]
    data = _tar(members, tarfile.USTAR_FORMAT)
    path = tmp_path / "dense.tar"
    path.write_bytes(data)
    with path.open("rb") as file:
        dense = walk_dense(file, len(data))
        canonical = walk_canonical(file, len(data))
    assert dense is not None and dense == canonical
    assert list(zip(*dense[:3], strict=True)) == _tarfile_listing(path)


@pytest.mark.parametrize("item_bytes", [64, 40_000], ids=["dense", "large"])
def test_local_reads_count_every_sample_byte(tmp_path: Path, item_bytes: int) -> None:
    """``bytes_read_local`` holds every sample read, whichever walk found the headers (the dense one
    maps the whole shard; the walk over large members reads headers alone)."""
    from shards_data import sample_bytes, tar_bytes

    from loaderfactory.shards import ShardsDataset

    path = tmp_path / "s.tar"
    path.write_bytes(tar_bytes([{"__key__": b"%03d" % i, "bin": bytes([i]) * item_bytes} for i in range(30)]))
    dataset = ShardsDataset([str(path)], index=None)
    before = dataset.stats()["bytes_read_local"]
    assert [dataset[i]["bin"][0] for i in range(30)] == list(range(30))
    assert dataset.stats()["bytes_read_local"] - before >= sample_bytes([str(path)])
    dataset.close()


def test_a_name_cut_by_a_nul_is_read_as_tarfile_reads_it(tmp_path: Path) -> None:
    """Bytes after a NUL in the name field (even to its last byte) are not part of the name."""
    data = bytearray(_tar([("a.cls", b"1"), ("b.cls", b"2")], tarfile.USTAR_FORMAT))
    data[5:100] = b"\0" + b"x" * 94  # the first name: "a.cls", a NUL, then junk to the field's end
    data[148:156] = b" " * 8
    data[148:156] = b"%06o\0 " % sum(data[:512])
    path = tmp_path / "cut.tar"
    path.write_bytes(bytes(data))
    with path.open("rb") as file:
        walked = walk_headers(file, len(data))
    assert walked is not None and walked[0] == _tarfile_listing(path)
    assert [s.key for s in scan_tar(Storage(), str(path))] == ["a", "b"]


def _rows(table: TarTable) -> list[tuple[str, list[tuple[str, int, int]]]]:
    return [
        (key, [(table.fields[m], table.offsets[m], table.sizes[m]) for m in range(first, stop)])
        for key, first, stop in zip(table.keys, table.bounds[:-1], table.bounds[1:], strict=True)
    ]


NAME_SETS: dict[str, tuple[list[str], bool]] = {
    "same fields": ([f"{i:05d}.{f}" for i in range(600) for f in ("data.npy", "label.cls")], True),
    "keys of many lengths": ([f"{i}.{f}" for i in range(1200) for f in ("jpg", "seg.png", "cls")], True),
    "fields that vary": ([f"{i:03d}.{f}" for i in range(300) for f in ("a", "b.c", "d")[: 1 + i % 3]], True),
    "folders": (
        ["train/s0/000.cls", "train/s0/000.txt", "a.b/c.txt", "./k.txt", "/abs/x.y.z", ".hidden", "d/.e"],
        True,
    ),
    "no field": (["a.cls", "noext", "b.cls"], False),
    "an empty field": (["a.cls", "a.", "b.cls"], False),
    "a double slash": (["a.cls", "x//b.cls"], False),
}


@pytest.mark.parametrize("name_set", NAME_SETS, ids=list(NAME_SETS))
def test_members_grouped_at_once_are_the_samples_the_rules_give(tmp_path: Path, name_set: str) -> None:
    """Keys, fields, offsets and sizes as the member-by-member rules give them, for names that the
    numpy grouping takes (and is then used for) and names it leaves to the rules."""
    names, grouped_at_once = NAME_SETS[name_set]
    data = _tar([(name, bytes([i % 251]) * (i % 600)) for i, name in enumerate(names)], tarfile.USTAR_FORMAT)
    path = tmp_path / "s.tar"
    path.write_bytes(data)
    with path.open("rb") as file:
        blocks = header_blocks(file, len(data))
        assert blocks is not None
        by_the_rules, _ = _scan_by_the_rules(file, str(path), len(data))
    at_once = group_members(blocks, len(data))
    assert (at_once is not None) == grouped_at_once
    assert _rows(scan_tar(Storage(), str(path))) == _rows(by_the_rules)
    if at_once is not None:
        assert _rows(at_once) == _rows(by_the_rules)
    with_fields = [name for name in names if split_member_name(name)[1]]  # webdataset skips the others
    assert sum(len(members) for _, members in _rows(by_the_rules)) == len(with_fields)
