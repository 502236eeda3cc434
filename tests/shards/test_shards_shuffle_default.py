"""``shuffle: true`` over shards mixes across shards by default (``shuffle_window: auto``, as many
shards as fit in ``shuffle_memory``), stays exact (every id once, rank-free, resumable), is shown
and warned about by the plan, and ``pack(shuffle=True)`` writes items in a seeded random order."""

from __future__ import annotations

import json
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from shards_data import write_tar_shards

from loaderfactory import build_loader
from loaderfactory.plan import format_plan, make_plan
from loaderfactory.shards import ShardsDataset, pack
from loaderfactory.shards.order import window_order

CLASSES, SHARDS_PER_CLASS, PER_SHARD = 10, 2, 32
COUNTS = [PER_SHARD] * (CLASSES * SHARDS_PER_CLASS)
"""640 samples in 20 shards stored in class order: sample ``i`` (its ``cls``) is of class
``i // 64``, so each class fills two shards."""
TOTAL, BATCH, SEED = sum(COUNTS), 64, 11
CHI2_CRITICAL_DF90 = 137.21
"""The chi-square distribution's 0.999 quantile at 90 degrees of freedom (10 batches × (10 − 1)
classes), from the standard tables: a uniform class mix exceeds it 1 time in 1000."""


@pytest.fixture
def urls(tmp_path: Path) -> list[str]:
    return write_tar_shards(tmp_path / "data", COUNTS)


def _config(urls: list[str], **loader: Any) -> dict[str, Any]:
    """The shards dataset with its defaults, read shuffled in batches of 64."""
    options = {"kind": "torch", "batch_size": BATCH, "shuffle": True, "num_workers": 0} | loader
    return {"dataset": {"kind": "shards", "urls": urls}, "loader": options, "seed": SEED}


def _batches(loader: Any) -> list[list[int]]:
    return [[int(i) for i in batch["cls"]] for batch in loader]


def _ids(loader: Any) -> list[int]:
    """The ids of an epoch, batch after batch."""
    return [i for batch in _batches(loader) for i in batch]


def test_default_shuffled_batches_hold_the_classes_uniformly(urls: list[str]) -> None:
    """Each batch's class counts pass a chi-square test against uniform: the sum over the epoch's 10
    batches of Σ (count − 6.4)² / 6.4 stays below the 0.999 quantile at 90 degrees of freedom
    (the old default, a window of one shard, gives batches of 1–2 classes: 2,560)."""
    with build_loader(_config(urls)) as loader:
        batches = _batches(loader)
    expected = BATCH / CLASSES
    statistic = 0.0
    for batch in batches:
        counts = Counter(i // (PER_SHARD * SHARDS_PER_CLASS) for i in batch)
        statistic += sum((counts.get(c, 0) - expected) ** 2 / expected for c in range(CLASSES))
    assert len(batches) == 10 and statistic < CHI2_CRITICAL_DF90, statistic


@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_id_once_per_epoch_in_one_window_of_every_shard(urls: list[str], num_workers: int) -> None:
    """With 20 small shards the automatic window spans them all: each epoch reads every id once, in
    ``window_order`` with a window of 20 shards."""
    with build_loader(_config(urls, num_workers=num_workers)) as loader:
        epochs = [_ids(loader), _ids(loader)]
    assert epochs == [window_order(COUNTS, SEED, epoch, len(COUNTS)).tolist() for epoch in (0, 1)]
    assert all(sorted(ids) == list(range(TOTAL)) for ids in epochs)


def test_the_window_is_what_fits_in_shuffle_memory(urls: list[str]) -> None:
    """``shuffle_memory`` of three shards' bytes makes a window of 3 shards; the shards' bytes alone
    decide it, so the order is the same however many shards stay open."""
    largest = max(Path(url).stat().st_size for url in urls)
    dataset = ShardsDataset(urls, shuffle_memory=3 * largest + 1, progress=False)
    wide_open = ShardsDataset(urls, shuffle_memory=3 * largest + 1, open_shards=9, progress=False)
    assert dataset.shuffle_window == 3 and dataset.open_shards == 4
    assert dataset.epoch_order(SEED, 0) == wide_open.epoch_order(SEED, 0)
    assert dataset.epoch_order(SEED, 0) == window_order(COUNTS, SEED, 0, 3).tolist()


def test_an_open_shards_below_the_window_is_refused_when_shuffling(urls: list[str]) -> None:
    """An ``open_shards`` set below the automatic window would reopen shards for nearly every
    sample: the shuffled epoch refuses to start, saying what to set; stored order reads."""
    dataset = ShardsDataset(urls, open_shards=2, progress=False)
    with pytest.raises(
        ValueError, match=r"open_shards=2 is below shuffle_window=20 \(auto.*set open_shards ≥ 20"
    ):
        dataset.epoch_order(SEED, 0)
    config = _config(urls, shuffle=False)
    config["dataset"]["open_shards"] = 2
    with build_loader(config) as loader:
        assert _ids(loader) == list(range(TOTAL))


def test_ranks_split_the_one_global_order(urls: list[str]) -> None:
    """At world size 2 the ranks' parts interleave back into the world-size-1 order: the order is
    rank-free."""
    with build_loader(_config(urls)) as loader:
        alone = _ids(loader)
    parts = []
    for rank in (0, 1):
        config = _config(urls, batch_size=BATCH // 2, distributed={"rank": rank, "world_size": 2})
        with build_loader(config) as loader:
            parts.append(_ids(loader))
    assert [i for pair in zip(*parts, strict=True) for i in pair] == alone
    assert alone == window_order(COUNTS, SEED, 0, len(COUNTS)).tolist()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_resume_reads_the_rest_of_the_same_order(urls: list[str], num_workers: int) -> None:
    """A state saved after 4 batches resumes with exactly the rest of the default order."""
    config = _config(urls, num_workers=num_workers)
    with build_loader(config) as loader:
        iterator = iter(loader)
        before = [int(i) for _ in range(4) for i in next(iterator)["cls"]]
        state = json.loads(json.dumps(loader.state_dict()))
    with build_loader(config) as resumed:
        resumed.load_state_dict(state)
        after = _ids(resumed)
    assert before + after == window_order(COUNTS, SEED, 0, len(COUNTS)).tolist()


def _plan_text(urls: list[str], **dataset: Any) -> str:
    config = _config(urls)
    config["dataset"] |= dataset
    with build_loader(config) as loader:
        return format_plan(make_plan(loader))


def test_the_plan_shows_the_window_and_warns_when_batches_see_few_shards(urls: list[str]) -> None:
    """The plan shows the window, the bytes it holds and the shards a batch sees; with a window of
    one shard it warns that batches see few shards and says what to set."""
    sizes = [Path(url).stat().st_size for url in urls]
    wide = _plan_text(urls)
    assert "shuffle: on; a window of 20 of 20 shard(s) (auto: as many of the largest shard as fit" in wide
    assert f"holds up to 2.0 MiB ({sum(sizes)} bytes) in the page cache" in wide
    assert "warning" not in wide
    narrow = _plan_text(urls, shuffle_memory=max(sizes))
    assert "a window of 1 of 20 shard(s)" in narrow
    assert (
        "warning: a shuffled batch of 64 sees about 1.0 of the 20 shards (shuffle_window 1): data stored"
        " in class order gives batches of few classes; set dataset.shuffle_memory="
    ) in narrow
    assert "(a window of 7 shards), or write the shards in random order (pack.shuffle=true)" in narrow


def _packed(folder: Path) -> list[tuple[int, int]]:
    """``(key, value)`` of each item in the order the tar shards store them, read from the members
    themselves (``000042.value.cls`` holds ``42``)."""
    stored = []
    for shard in sorted(folder.glob("*.tar")):
        with tarfile.open(shard) as archive:
            for member in archive.getmembers():
                data = archive.extractfile(member)
                assert data is not None
                stored.append((int(member.name.split(".")[0]), int(data.read())))
    return stored


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pack_shuffle_writes_a_seeded_permutation(tmp_path: Path, num_workers: int) -> None:
    """``pack(shuffle=True, seed=s)`` stores every item once, keyed by its dataset index and holding
    its own data, in an order that depends on the seed alone; without shuffle, in dataset order."""
    items = [{"value": i} for i in range(200)]

    def ids(name: str, **options: Any) -> list[int]:
        out = tmp_path / name
        pack(items, str(out), shard_size=2000, num_workers=num_workers, progress=False, **options)
        stored = _packed(out)
        assert all(key == value for key, value in stored)
        return [key for key, _ in stored]

    first, again = ids("a", shuffle=True, seed=1), ids("b", shuffle=True, seed=1)
    other = ids("c", shuffle=True, seed=2)
    assert sorted(first) == list(range(200)) and first != list(range(200))
    assert first == again != other
    assert ids("d") == list(range(200))
