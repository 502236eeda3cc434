"""Shard URL expansion: lists, brace patterns, folders and prefixes, local globs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loaderfactory.shards import expand_braces, expand_urls


@given(first=st.integers(0, 500), count=st.integers(1, 40), width=st.integers(1, 6))
def test_a_zero_padded_range_names_every_number_once_at_its_width(first: int, count: int, width: int) -> None:
    """``{0007..0012}`` stands for each number of the range, in order, padded to the first bound's width."""
    last = first + count - 1
    width = max(width, len(str(last)))
    pattern = f"s3://b/train-{first:0{width}d}..{last:0{width}d}.tar".replace("-", "-{", 1).replace(
        ".tar", "}.tar"
    )
    urls = expand_braces(pattern)
    assert urls == [f"s3://b/train-{n:0{width}d}.tar" for n in range(first, last + 1)]


@given(st.lists(st.text("abcxyz0123", min_size=1, max_size=4), min_size=2, max_size=5, unique=True))
def test_alternatives_multiply_with_other_braces(names: list[str]) -> None:
    """``{a,b}-{0..1}`` is the product of its braces, the first brace varying slowest."""
    urls = expand_braces(f"data/{{{','.join(names)}}}-{{0..1}}.tar")
    assert urls == [f"data/{name}-{n}.tar" for name in names for n in (0, 1)]


def test_unpadded_ranges_and_plain_urls() -> None:
    """``{8..10}`` is not padded; a URL without braces stands for itself."""
    assert expand_braces("x{8..10}.tar") == ["x8.tar", "x9.tar", "x10.tar"]
    assert expand_urls(["a.tar", "s3://b/c-{0..1}.parquet"]) == [
        "a.tar",
        "s3://b/c-0.parquet",
        "s3://b/c-1.parquet",
    ]


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("t-{5..2}.tar", r"t-\{5..2\}.tar: range \{5..2\} counts down; write \{2..5\}"),
        ("t-{a}.tar", r"neither a range like \{000..127\} nor alternatives"),
        ("t-{{0..1}}.tar", "unbalanced or nested braces"),
    ],
)
def test_a_bad_pattern_is_named_with_a_fix(pattern: str, message: str) -> None:
    """A brace the expander cannot read is reported with the pattern and what to write instead."""
    with pytest.raises(ValueError, match=message):
        expand_braces(pattern)


def test_a_folder_stands_for_its_shards_sorted(tmp_path: Path) -> None:
    """A local folder (or ``file://`` folder) gives its ``.tar``/``.parquet`` files, sorted, nothing else."""
    for name in ["b.tar", "a.parquet", "sub/c.tar", "notes.txt", "loaderfactory-shards.json"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    expected = [str(tmp_path / n) for n in ["a.parquet", "b.tar", "sub/c.tar"]]
    assert expand_urls(str(tmp_path)) == expected
    assert expand_urls(f"file://{tmp_path}/") == [f"file://{p}" for p in expected]


def test_a_glob_stands_for_its_matches_sorted(tmp_path: Path) -> None:
    """A local glob gives its matches in sorted order; one that matches nothing names itself."""
    for name in ["t-2.tar", "t-1.tar", "u-1.tar"]:
        (tmp_path / name).write_bytes(b"")
    assert expand_urls(str(tmp_path / "t-*.tar")) == [str(tmp_path / "t-1.tar"), str(tmp_path / "t-2.tar")]
    with pytest.raises(FileNotFoundError, match=r"v-\*\.tar"):
        expand_urls(str(tmp_path / "v-*.tar"))


def test_a_folder_without_shards_is_an_error_naming_it(tmp_path: Path) -> None:
    """An empty folder is reported with its path instead of giving an empty dataset."""
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}/: no .tar or .parquet shards"):
        expand_urls(f"{tmp_path}/")
