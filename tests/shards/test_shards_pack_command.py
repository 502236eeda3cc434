"""``loaderfactory run.mode=pack`` on the command line: to a real S3 server (settings given as
``pack.storage_options`` or as the AWS environment), a ``_target_`` dataset in both formats, and the
progress bar; each read back through ``build_loader`` with 2 workers, every item once and equal."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cli_forks import run_command
from pack_command_data import PackItems
from packed_items import assert_same, expected_item
from s3_server import S3Server

import loaderfactory
from loaderfactory.shards import INDEX_NAME, Storage

pytestmark = pytest.mark.usefixtures("cli_forks")  # command runs fork from one interpreter

SUPPORT = Path(__file__).resolve().parents[1] / "support"
TARGET = "pack_command_data.PackItems"
"""Importable by the command run from ``SUPPORT``: ``python -m`` puts the current folder first."""
LENGTH = 24
SHARD_SIZE = {"tar": "32KiB", "parquet": "8KiB"}
"""A few items per shard, several shards (a tar member takes at least 1 KiB: header and padding)."""


def _pack(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``loaderfactory run.mode=pack ARGS`` of :class:`PackItems` (``LENGTH`` items), run from
    tests/support/."""
    dataset = ["~dataset", f"+dataset._target_={TARGET}", f"+dataset.length={LENGTH}"]
    return run_command(
        SUPPORT, "run.mode=pack", *dataset, *args, f"hydra.run.dir={tmp_path / 'run'}", env=env
    )


def _read_back(urls: str, storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every sample of the shards at ``urls``, unbatched, through ``build_loader`` with 2 workers."""
    dataset = {"kind": "shards", "urls": urls, "storage_options": storage_options or {}, "metadata": True}
    loader = {"kind": "torch", "batch_size": None, "num_workers": 2}
    with loaderfactory.build_loader({"dataset": dataset, "loader": loader}) as samples:
        return list(samples)


def _check_items(samples: list[dict[str, Any]]) -> None:
    """Each id once, under its zero-padded key, with the source item's fields, values and types."""
    source = PackItems(LENGTH)
    ids = Counter(sample["id"] for sample in samples)
    assert ids == Counter(range(LENGTH)), ids
    for sample in samples:
        i = sample["id"]
        assert sample["__key__"] == f"{i:06d}"
        fields = {name: value for name, value in sample.items() if not name.startswith("__")}
        item = source[i]
        assert list(fields) == list(item), f"item {i}: {list(fields)} != {list(item)}"
        for key, value in item.items():
            assert_same(fields[key], expected_item(value), f"item {i}, {key}")


def _wrote(result: subprocess.CompletedProcess[str], shards: int) -> None:
    """The command exited 0 and said it wrote ``shards`` shards of all the items."""
    assert result.returncode == 0, result.stderr
    said = result.stdout + result.stderr
    assert f"wrote {shards} shard(s), {LENGTH} samples" in said, said


@pytest.mark.parametrize("settings", ["pack.storage_options", "environment"])
def test_the_command_packs_to_s3_and_two_workers_read_every_item_back(
    s3: S3Server, fsspec_io_thread: None, tmp_path: Path, settings: str
) -> None:
    """``pack.out=s3://...`` with the server's settings as ``pack.storage_options`` or as the AWS
    variables (``AWS_ENDPOINT_URL`` included) writes shards and index there; they read back exactly."""
    out = s3.url(f"pack-command/{tmp_path.name}/")  # a prefix of its own, whatever else the bucket holds
    args = [
        f"pack.out={out}",
        f"pack.shard_size={SHARD_SIZE['tar']}",
        "pack.num_workers=2",
        "run.progress=false",
    ]
    env = None
    if settings == "pack.storage_options":
        args += [f"pack.storage_options.{name}={value}" for name, value in s3.storage_options.items()]
    else:
        nowhere = str(tmp_path / "no-aws-config")  # only the variables below, no ~/.aws files
        env = {
            "AWS_ENDPOINT_URL": s3.endpoint_url,
            "AWS_ACCESS_KEY_ID": s3.key,
            "AWS_SECRET_ACCESS_KEY": s3.secret,
            "AWS_DEFAULT_REGION": s3.region,
            "AWS_CONFIG_FILE": nowhere,
            "AWS_SHARED_CREDENTIALS_FILE": nowhere,
        }
    result = _pack(tmp_path, *args, env=env)
    names = [url.rsplit("/", 1)[-1] for url in Storage(s3.storage_options).list(out)]
    written = sum(name.startswith("shard-") and name.endswith(".tar") for name in names)
    _wrote(result, written)
    assert written > 1 and INDEX_NAME in names, names
    assert f"index: {out}{INDEX_NAME}" in result.stdout + result.stderr
    _check_items(_read_back(out, s3.storage_options))


@pytest.mark.parametrize("fmt", ["parquet", "tar"])
def test_a_target_dataset_packed_in_either_format_reads_back_exactly(tmp_path: Path, fmt: str) -> None:
    """``dataset._target_`` packed as Parquet or tar, in several shards by 2 workers: tensors, arrays,
    numbers, strings and bytes read back equal to the source items through ``build_loader``."""
    out = tmp_path / "shards"
    result = _pack(
        tmp_path,
        f"pack.out={out}",
        f"pack.format={fmt}",
        f"pack.shard_size={SHARD_SIZE[fmt]}",
        "pack.num_workers=2",
    )
    written = sorted(p.name for p in out.glob(f"shard-*.{fmt}"))
    _wrote(result, len(written))
    assert len(written) > 1 and written[0] == f"shard-000000.{fmt}", written
    assert (out / INDEX_NAME).is_file()
    _check_items(_read_back(f"{out}/"))


@pytest.mark.parametrize("progress", [True, False])
def test_the_progress_bar_shows_on_stderr_only_with_run_progress(tmp_path: Path, progress: bool) -> None:
    """``run.progress=true`` draws a ``packing`` bar counting the items on stderr; ``false`` none."""
    result = _pack(tmp_path, f"pack.out={tmp_path / 'shards'}", f"run.progress={str(progress).lower()}")
    _wrote(result, 1)
    bar = re.search(rf"packing: 100%\|[^|\n\r]*\| {LENGTH}/{LENGTH} \[[^\]]*item/s\]", result.stderr)
    if progress:
        assert bar is not None, result.stderr
    else:
        assert bar is None and "packing" not in result.stderr and "item/s" not in result.stderr, result.stderr
    assert "packing" not in result.stdout
