"""The header walk that guesses where headers lie from a pattern of member sizes: it finds exactly
the headers the walk one by one finds, or declines (None) and leaves the archive to that walk."""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path

import numpy as np
import pytest

from loaderfactory.shards import Storage
from loaderfactory.shards.formats.tar.blocks import header_blocks
from loaderfactory.shards.formats.tar.headers import canonical_blocks
from loaderfactory.shards.formats.tar.shard import scan_tar
from loaderfactory.shards.formats.tar.strided import strided_blocks


def _tar(sizes: list[int], fields: tuple[str, ...] = ("npy", "cls")) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for number, size in enumerate(sizes):
            info = tarfile.TarInfo(f"{number // len(fields):06d}.{fields[number % len(fields)]}")
            info.size = size
            archive.addfile(info, io.BytesIO(bytes([number % 251]) * size))
    return out.getvalue()


def _walks(tmp_path: Path, data: bytes) -> tuple[object, object]:
    path = tmp_path / "walked.tar"
    path.write_bytes(data)
    with path.open("rb") as file:
        return strided_blocks(file, len(data)), canonical_blocks(file, len(data))


def _same(strided: object, canonical: object) -> None:
    assert strided is not None and canonical is not None
    headers, offsets, sizes, end = strided  # type: ignore[misc]
    expected = canonical  # type: ignore[assignment]
    assert np.array_equal(headers, expected[0]) and headers.dtype == np.uint8
    assert offsets.tolist() == expected[1].tolist() and sizes.tolist() == expected[2].tolist()
    assert end == expected[3]


@pytest.mark.parametrize(
    "sizes",
    [
        pytest.param([100_000, 1] * 300, id="array and label"),
        pytest.param([5000] * 700, id="one size"),
        pytest.param([70_000, 3, 900] * 200, id="three fields"),
        pytest.param([20_000, 2] * 150 + [7] + [20_000, 2] * 150, id="one odd member"),
        pytest.param([30_000, 2] * 40 + [10_000, 2] * 40 + [30_000, 5] * 40, id="sizes change twice"),
        pytest.param([40_000, 1] * 3, id="fewer members than the pattern needs"),
        pytest.param([0, 512, 513, 1024] * 60, id="sizes on block bounds"),
    ],
)
def test_it_finds_the_headers_the_walk_one_by_one_finds(tmp_path: Path, sizes: list[int]) -> None:
    _same(*_walks(tmp_path, _tar(sizes)))


def test_sizes_without_a_pattern_are_left_to_the_walk_one_by_one(tmp_path: Path) -> None:
    rng = random.Random(5)
    sizes = [rng.randrange(1000, 90_000) for _ in range(200)]
    strided, canonical = _walks(tmp_path, _tar(sizes))
    assert strided is None and canonical is not None
    path = tmp_path / "walked.tar"
    with path.open("rb") as file:
        blocks = header_blocks(file, path.stat().st_size)
    assert blocks is not None and blocks.data_offsets.tolist() == [o + 512 for o in canonical[1].tolist()]  # type: ignore[index]


def test_whatever_the_archive_it_agrees_with_the_walk_or_declines(tmp_path: Path) -> None:
    """Archives cut anywhere, with a garbled size field or an empty one: never other headers."""
    rng = random.Random(11)
    for trial in range(60):
        pattern = [rng.choice([1, 700, 4096, 33_333]) for _ in range(rng.randint(1, 3))]
        data = bytearray(_tar(pattern * rng.randint(1, 120)))
        damage = trial % 4
        if damage == 1:
            del data[rng.randrange(len(data)) :]
        elif damage == 2:  # a size field that is not octal digits, in some header
            strided, canonical = _walks(tmp_path, bytes(data))
            offsets = canonical[1].tolist()  # type: ignore[index]
            at = offsets[rng.randrange(len(offsets))]
            data[at + 124 : at + 135] = b"  12345678 "
        elif damage == 3:  # the end-of-archive blocks gone, or a byte set in them
            end = _walks(tmp_path, bytes(data))[1][3]  # type: ignore[index]
            data[end + rng.randrange(512)] = 1
        strided, canonical = _walks(tmp_path, bytes(data))
        if strided is not None:
            _same(strided, canonical)
        elif damage == 0:
            pytest.fail("a whole archive with a repeating pattern was declined")


def test_an_archive_with_no_member_is_declined(tmp_path: Path) -> None:
    strided, canonical = _walks(tmp_path, _tar([]))
    assert strided is None and canonical is None


def test_a_shard_walked_this_way_reads_as_tarfile_lists_it(tmp_path: Path) -> None:
    path = tmp_path / "s.tar"
    path.write_bytes(_tar([50_000, 2] * 100))
    with path.open("rb") as file:
        assert strided_blocks(file, path.stat().st_size) is not None
    table = scan_tar(Storage(), str(path))
    with tarfile.open(path) as archive:
        listed = [(m.name, m.offset_data, m.size) for m in archive]
    assert [
        (f"{table.keys[m // 2]}.{table.fields[m]}", table.offsets[m], table.sizes[m]) for m in range(200)
    ] == listed
