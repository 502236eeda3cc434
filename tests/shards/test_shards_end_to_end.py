"""``dataset: {kind: shards}`` end to end, through ``build_loader`` and the command: decoding by
extension (and the refusal of pickled objects), Parquet shards, every URL form, and a shuffled run of
the command. Each test counts sample ids: none lost, none twice, each sample's content its own."""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from cli_forks import run_command
from shards_data import id_samples, tar_bytes, write_parquet_shards, write_tar_shards

import loaderfactory
from loaderfactory.shards import ShardError

pytestmark = pytest.mark.usefixtures("cli_forks")  # command runs fork from one interpreter

HERE = __name__
COUNTS = [4, 6, 5]
TOTAL = sum(COUNTS)
FIELDS = ("cls", "npy", "json", "txt", "jpeg", "pt")


# --- samples with every decoded kind of field ---------------------------------------------------


def _gray(i: int) -> int:
    """The gray level of sample ``i``'s image: far enough from its neighbours' to tell them apart."""
    return 10 + 20 * (i % 12)


def _jpeg_bytes(i: int) -> bytes:
    """A 4×6 JPEG, every pixel gray :func:`_gray` (``i``): a flat image survives JPEG nearly exactly."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (6, 4), (_gray(i),) * 3).save(out, format="JPEG", quality=95)
    return out.getvalue()


def _pt_bytes(value: object) -> bytes:
    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()


def _rich_samples(first: int, count: int) -> list[dict[str, bytes]]:
    """:func:`id_samples` plus ``txt``, ``jpeg`` and ``pt`` (a tensor) fields, each carrying the id."""
    samples = id_samples(first, count)
    for i, sample in zip(range(first, first + count), samples, strict=True):
        sample["txt"] = f"sample {i} ✓".encode()
        sample["jpeg"] = _jpeg_bytes(i)
        sample["pt"] = _pt_bytes(torch.full((2, 2), float(i)))
    return samples


def _write_rich_shards(folder: Path, counts: list[int]) -> dict[str, dict[str, bytes]]:
    """Tar shards ``train-00000k.tar`` of :func:`_rich_samples`; every sample written, by key."""
    folder.mkdir(parents=True, exist_ok=True)
    written, first = {}, 0
    for number, count in enumerate(counts):
        samples = _rich_samples(first, count)
        (folder / f"train-{number:06d}.tar").write_bytes(tar_bytes(samples))
        written.update({sample["__key__"].decode(): sample for sample in samples})
        first += count
    return written


class Payload:
    """An arbitrary object in a ``.pt`` member: ``torch.load(weights_only=True)`` must refuse it.
    Unpickling it would write ``marker``, so a test can tell that no code of the pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, str]) -> None:
        Path(state["marker"]).write_text("unpickled")
        self.__dict__.update(state)


# --- loading ------------------------------------------------------------------------------------


def keep_samples(samples: Any) -> Any:
    """A collate that leaves a batch as its list of samples, to check each sample's own fields."""
    return samples


def _config(
    urls: Any, *, batch_size: int | None = 3, num_workers: int = 0, shuffle: bool = False, **dataset: Any
) -> dict[str, Any]:
    loader = {
        "kind": "torch",
        "batch_size": batch_size,
        "num_workers": num_workers,
        "shuffle": shuffle,
        "collate": {"_target_": f"{HERE}.keep_samples", "_partial_": True},
    }
    return {"dataset": {"kind": "shards", "urls": urls, **dataset}, "loader": loader, "seed": 3}


def _samples(batches: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Each sample of ``batches``: lists of samples, or samples themselves (``batch_size: null``)."""
    for batch in batches:
        yield from [batch] if isinstance(batch, dict) else batch


def _load(config: dict[str, Any]) -> list[dict[str, Any]]:
    with loaderfactory.build_loader(config) as loader:
        return list(_samples(loader))


def _tar_id(sample: dict[str, Any]) -> int:
    """The id of a tar sample, from its key (``sample000012``), whatever its fields decoded to."""
    return int(sample["__key__"].removeprefix("sample"))


def _assert_each_id_once(ids: list[int], total: int) -> None:
    assert Counter(ids) == Counter(range(total)), f"lost: {set(range(total)) - set(ids)}, ids: {ids}"


# --- 1. decode ----------------------------------------------------------------------------------

LOADS = pytest.mark.parametrize(("batch_size", "num_workers"), [(None, 0), (3, 2)])
"""Item by item in this process, and in batches (read a run at a time) by two workers."""


@LOADS
def test_decode_false_gives_every_field_as_the_bytes_written(
    tmp_path: Path, batch_size: int | None, num_workers: int
) -> None:
    """``decode: false``: every field of every sample is the bytes of its member, as written."""
    written = _write_rich_shards(tmp_path, COUNTS)
    config = _config(f"{tmp_path}/", batch_size=batch_size, num_workers=num_workers, decode=False)
    samples = _load(config)
    _assert_each_id_once([_tar_id(s) for s in samples], TOTAL)
    for sample in samples:
        fields = {field: sample[field] for field in FIELDS}
        assert fields == {field: written[sample["__key__"]][field] for field in FIELDS}


@LOADS
def test_decode_a_list_decodes_only_the_extensions_named(
    tmp_path: Path, batch_size: int | None, num_workers: int
) -> None:
    """``decode: [npy]``: ``.npy`` becomes its tensor; ``.cls`` and every other field stay bytes."""
    written = _write_rich_shards(tmp_path, COUNTS)
    config = _config(f"{tmp_path}/", batch_size=batch_size, num_workers=num_workers, decode=["npy"])
    samples = _load(config)
    _assert_each_id_once([_tar_id(s) for s in samples], TOTAL)
    for sample in samples:
        i = _tar_id(sample)
        assert torch.equal(sample["npy"], torch.full((3,), i, dtype=torch.int64))
        assert sample["cls"] == str(i).encode()
        for field in ("cls", "json", "txt", "jpeg", "pt"):
            assert sample[field] == written[sample["__key__"]][field], field


@LOADS
def test_default_decode_turns_each_extension_into_its_type(
    tmp_path: Path, batch_size: int | None, num_workers: int
) -> None:
    """By default ``.npy`` → tensor, ``.cls`` → int, ``.json`` → object, ``.txt`` → str, ``.jpeg`` →
    uint8 CHW tensor, ``.pt`` → the tensor saved; each sample's fields carry its own id."""
    _write_rich_shards(tmp_path, COUNTS)
    samples = _load(_config(f"{tmp_path}/", batch_size=batch_size, num_workers=num_workers))
    _assert_each_id_once([s["cls"] for s in samples], TOTAL)
    for sample in samples:
        i = sample["cls"]
        assert isinstance(i, int) and _tar_id(sample) == i
        assert torch.equal(sample["npy"], torch.full((3,), i, dtype=torch.int64))
        assert sample["json"] == {"id": i}
        assert sample["txt"] == f"sample {i} ✓"
        image = sample["jpeg"]
        assert image.dtype == torch.uint8 and image.shape == (3, 4, 6)
        assert (image.int() - _gray(i)).abs().max() <= 3, (i, image)
        assert torch.equal(sample["pt"], torch.full((2, 2), float(i)))


def _shards_with_a_pickled_object(folder: Path, marker: Path) -> tuple[str, bytes]:
    """Shards of :func:`_rich_samples` (ids 0..6); sample 5 (the second of the second shard) has a
    ``.pt`` holding a :class:`Payload`. Its shard's URL, and that member's bytes."""
    folder.mkdir()
    evil = _pt_bytes(Payload(marker))
    first = _rich_samples(0, 4)
    second = _rich_samples(4, 3)
    second[1]["pt"] = evil
    (folder / "train-000000.tar").write_bytes(tar_bytes(first))
    (folder / "train-000001.tar").write_bytes(tar_bytes(second))
    return str(folder / "train-000001.tar"), evil


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_pt_holding_a_pickled_object_is_refused_naming_shard_and_sample(
    tmp_path: Path, num_workers: int
) -> None:
    """A ``.pt`` member holding a class instance is refused by ``torch.load(weights_only=True)``: the
    consumer gets ShardError naming the shard's URL, the sample, the field and the fix, after every
    batch before it; the object's code never ran."""
    marker = tmp_path / "unpickled"
    url, _ = _shards_with_a_pickled_object(tmp_path / "data", marker)
    seen: list[int] = []
    config = _config(f"{tmp_path / 'data'}/", batch_size=2, num_workers=num_workers)
    with pytest.raises(ShardError) as refused, loaderfactory.build_loader(config) as loader:
        for batch in loader:
            seen += [sample["cls"] for sample in batch]
    assert seen == [0, 1, 2, 3]  # the batch [4, 5] is the one refused
    message = str(refused.value)
    expected = (
        rf"{re.escape(url)}: sample 'sample000005' \(#1\), field 'pt': cannot decode "
        r"\(UnpicklingError: Weights only load failed"
    )
    assert re.search(expected, message), message
    assert f"GLOBAL {HERE}.Payload" in message  # torch names the class it would not build
    assert "pass decode=False or leave 'pt' out of decode" in message
    assert "; while reading sample #1 of the shard (#5 overall)" in message  # a worker adds its traceback
    assert not marker.exists()


def test_leaving_pt_out_of_decode_reads_the_pickled_object_as_bytes(tmp_path: Path) -> None:
    """The fix the refusal names: with ``pt`` left out of ``decode`` every sample is read, the
    pickled object's member as its bytes, never unpickled."""
    marker = tmp_path / "unpickled"
    _, evil = _shards_with_a_pickled_object(tmp_path / "data", marker)
    decode = ["npy", "cls", "json", "txt", "jpeg"]
    samples = _load(_config(f"{tmp_path / 'data'}/", num_workers=2, decode=decode))
    _assert_each_id_once([s["cls"] for s in samples], 7)
    pts = {s["cls"]: s["pt"] for s in samples}
    assert pts[5] == evil
    assert all(pts[i] == _pt_bytes(torch.full((2, 2), float(i))) for i in pts if i != 5)
    assert not marker.exists()


# --- 2. Parquet ---------------------------------------------------------------------------------

PARQUET_COUNTS = [5, 9, 3]  # written in row groups of 4: shards of one, two and three groups
PARQUET_TOTAL = sum(PARQUET_COUNTS)


def _assert_rows_intact(rows: list[dict[str, Any]], folder: Path) -> None:
    """Each row once, its columns as keys, each holding that row's values, ``__key__`` its row number."""
    _assert_each_id_once([row["id"] for row in rows], PARQUET_TOTAL)
    starts = np.cumsum([0, *PARQUET_COUNTS])
    for row in rows:
        i = row["id"]
        shard = int(np.searchsorted(starts, i, side="right")) - 1
        assert set(row) == {"__key__", "__url__", "id", "text", "vector", "npy"}
        assert row["text"] == f"row {i}" and row["vector"] == [float(i), float(i) + 0.5]
        assert torch.equal(row["npy"], torch.full((2,), i, dtype=torch.int32))
        assert row["__url__"] == str(folder / f"part-{shard:06d}.parquet")
        assert row["__key__"] == str(i - starts[shard])


def test_parquet_rows_shuffled_in_windows_by_zero_and_two_workers(tmp_path: Path) -> None:
    """Parquet shards through the torch loader, ``shuffle: true`` with ``shuffle_window: 2``: each row
    once with its columns as keys, the rows of two shards at a time mixed, in one order whether this
    process or two workers read them; the next epoch in another order."""
    write_parquet_shards(tmp_path, PARQUET_COUNTS)
    orders = {}
    for num_workers in (0, 2):
        config = _config(
            f"{tmp_path}/", batch_size=4, num_workers=num_workers, shuffle=True, shuffle_window=2
        )
        with loaderfactory.build_loader(config) as loader:
            epochs = [list(_samples(loader)) for _ in range(2)]
        for rows in epochs:
            _assert_rows_intact(rows, tmp_path)
        orders[num_workers] = [[row["id"] for row in rows] for rows in epochs]
    first, second = orders[0]
    assert first != sorted(first) and second != first
    assert orders[2] == orders[0]


RECORDER = '''"""A collate that writes the ids of each batch to a file, then collates it as torch does."""

from torch.utils.data import default_collate


def record(samples, out, field):
    with open(out, "a") as ids:
        ids.write("".join(f"{int(sample[field])}\\n" for sample in samples))
    return default_collate(samples)
'''


def _recorded_run(
    tmp_path: Path, field: str, *overrides: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], list[int]]:
    """``python -m loaderfactory dataset=shards OVERRIDES`` from ``tmp_path`` with a collate recording
    each batch's ``field``: the finished run, its report and the ids in the order collated."""
    (tmp_path / "e2e_recorder.py").write_text(RECORDER)  # the command imports it from its folder
    ids = tmp_path / "ids.txt"
    collate = f"loader.collate={{_target_:e2e_recorder.record,_partial_:true,out:'{ids}',field:{field}}}"
    done = run_command(
        tmp_path,
        "run.progress=false",
        f"hydra.run.dir={tmp_path / 'run'}",
        "dataset=shards",
        collate,
        *overrides,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads((tmp_path / "run" / "report.json").read_text())
    return done, report, [int(line) for line in ids.read_text().split()]


def test_the_command_runs_over_parquet_shards_shuffled(tmp_path: Path) -> None:
    """``run.mode=run`` (the default) over a folder of Parquet shards with ``loader.shuffle=true`` and
    two workers: exit 0; the report counts every row, the batches, the shards opened by the three
    processes; the collate saw each row id once, not in stored order."""
    write_parquet_shards(tmp_path / "data", PARQUET_COUNTS)
    done, report, ids = _recorded_run(
        tmp_path,
        "id",
        f"dataset.urls={tmp_path / 'data'}/",
        "loader.shuffle=true",
        "loader.num_workers=2",
        "loader.batch_size=4",
        "seed=3",
    )
    _assert_each_id_once(ids, PARQUET_TOTAL)
    assert ids != sorted(ids)
    assert report["items"] == PARQUET_TOTAL and report["batches"] == math.ceil(PARQUET_TOTAL / 4)
    shards = report["shards"]
    assert shards["shards_opened"] >= len(PARQUET_COUNTS) and shards["processes"] == 3
    assert shards["bytes_read"] == shards["bytes_read_local"] > 0 and shards["bytes_read_remote"] == 0
    assert report["config"]["dataset"]["urls"] == f"{tmp_path / 'data'}/"
    assert report["config"]["loader"]["shuffle"] is True
    assert f"report: {tmp_path / 'run' / 'report.json'}" in done.stdout + done.stderr


# --- 3. URL forms -------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["glob", "file:// list", "file:// folder", "braces"])
def test_every_url_form_reads_each_sample_once_in_shard_order(tmp_path: Path, form: str) -> None:
    """A local glob, ``file://`` URLs (a list, a folder) and a brace pattern each stand for the three
    train shards (not the ``valid`` shard nor the text file beside them, where the form picks): every
    id once, in stored order, each sample from its own shard."""
    paths = write_tar_shards(tmp_path, COUNTS)
    (tmp_path / "notes.txt").write_text("not a shard")
    if form != "file:// folder":  # a folder stands for every shard in it
        (tmp_path / "valid-000000.tar").write_bytes(tar_bytes(id_samples(100, 3)))
    forms: dict[str, str | list[str]] = {
        "glob": f"{tmp_path}/train-*.tar",
        "file:// list": [f"file://{path}" for path in paths],
        "file:// folder": f"file://{tmp_path}/",
        "braces": f"{tmp_path}/train-{{000000..000002}}.tar",
    }
    samples = _load(_config(forms[form], batch_size=4))
    assert [s["cls"] for s in samples] == list(range(TOTAL))
    starts = np.cumsum([0, *COUNTS])
    for sample in samples:
        shard = int(np.searchsorted(starts, sample["cls"], side="right")) - 1
        assert sample["__url__"].endswith(f"/train-{shard:06d}.tar"), (sample["cls"], sample["__url__"])
        assert sample["json"] == {"id": sample["cls"]}


# --- 4. a shuffled run of the command -----------------------------------------------------------


def test_a_shuffled_command_run_delivers_each_id_once_per_epoch_in_the_loaders_order(
    tmp_path: Path,
) -> None:
    """``loader.shuffle=true`` on the command line over tar shards, two epochs: exit 0, the report
    counts two epochs of items; each epoch gives every id once, in the order ``build_loader`` gives
    for the same seed and window (not the stored one), and the epochs differ."""
    write_tar_shards(tmp_path / "data", COUNTS)
    urls = f"{tmp_path / 'data'}/"
    _, report, ids = _recorded_run(
        tmp_path,
        "cls",
        f"dataset.urls={urls}",
        "dataset.shuffle_window=2",
        "loader.shuffle=true",
        "loader.batch_size=4",
        "run.epochs=2",
        "seed=3",
    )
    assert report["items"] == 2 * TOTAL and report["batches"] == 2 * math.ceil(TOTAL / 4)
    first, second = ids[:TOTAL], ids[TOTAL:]
    _assert_each_id_once(first, TOTAL)
    _assert_each_id_once(second, TOTAL)
    assert first != sorted(first) and second != first
    config = _config(urls, batch_size=4, shuffle=True, shuffle_window=2)
    with loaderfactory.build_loader(config) as loader:
        expected = [[sample["cls"] for sample in _samples(loader)] for _ in range(2)]
    assert [first, second] == expected
