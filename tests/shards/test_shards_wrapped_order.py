"""A dataset wrapping a ``ShardsDataset`` (augmentation, torch's ``Subset``) keeps its shard-window
order under ``shuffle: true``, or is warned about, naming the fix; the stats say when shards were
opened far more often than that order needs."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from shards_data import write_tar_shards
from torch.utils.data import Dataset, Subset

from loaderfactory import ForwardEpochOrder, build_loader
from loaderfactory.report import format_report
from loaderfactory.shards import ShardsDataset
from loaderfactory.shards.order import window_order

HERE = __name__
COUNTS = [20] * 12
TOTAL = sum(COUNTS)
SEED = 7


class Augmented(Dataset[dict[str, Any]]):
    """The usual augmentation wrapper: item ``i`` is ``dataset[i]``, with a field added."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        sample = self.dataset[index]
        return {"cls": sample["cls"], "flipped": True}


class ForwardedAugmented(ForwardEpochOrder, Augmented):
    """The same wrapper, declaring that item ``i`` is ``dataset[i]``."""


class Pairs(Dataset[dict[str, Any]]):
    """A wrapper of another length (item ``i`` is samples ``2i`` and ``2i+1``): not warned about."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset) // 2

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"cls": self.dataset[2 * index]["cls"]}


@pytest.fixture
def urls(tmp_path: Path) -> list[str]:
    return write_tar_shards(tmp_path, COUNTS)


def _shards(urls: list[str], **options: Any) -> ShardsDataset:
    return ShardsDataset(urls, progress=False, **({"open_shards": 2, "shuffle_window": 1} | options))


def _read(dataset: Any = None, config: dict[str, Any] | None = None, shuffle: bool = True) -> list[int]:
    """Ids of one epoch through ``build_loader`` (the torch kind, batches of 4)."""
    loader = {"kind": "torch", "batch_size": 4, "shuffle": shuffle}
    with build_loader({"loader": loader, "seed": SEED, **(config or {})}, dataset=dataset) as run:
        return [int(i) for batch in run for i in batch["cls"]]


def test_a_wrapper_that_hides_the_order_is_warned_about_and_reported(urls: list[str]) -> None:
    """A plain wrapper reads every sample once, but in uniform order: a shard opened for nearly
    every sample. A warning names the wrapper and the fix; the stats' note says it too."""
    shards = _shards(urls)
    with pytest.warns(
        UserWarning, match=r"Augmented wraps a ShardsDataset .*loaderfactory.ForwardEpochOrder"
    ) as caught:
        ids = _read(Augmented(shards))
    assert sorted(ids) == list(range(TOTAL))
    assert sum("Augmented wraps" in str(w.message) for w in caught) == 1
    stats = shards.stats()
    assert stats["shards_opened"] > 10 * len(COUNTS)
    assert "epoch_order" in stats["note"] and "ForwardEpochOrder" in stats["note"]
    assert "epoch_order" in format_report({"shards": stats})


def test_a_forwarding_wrapper_keeps_the_window_order(urls: list[str]) -> None:
    """Declared with ``ForwardEpochOrder``: the ids come in the shards' window order, each shard
    opened once, and nothing is warned about or noted."""
    shards = _shards(urls)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids = _read(ForwardedAugmented(shards))
    assert ids == window_order(COUNTS, SEED, 0, 1).tolist()
    stats = shards.stats()
    assert stats["shards_opened"] == len(COUNTS) and "note" not in stats


def test_a_subset_follows_the_window_order_of_its_indices(urls: list[str]) -> None:
    """torch's ``Subset`` is forwarded on its own: its items come in the order their indices take in
    the window order, each shard opened once."""
    shards = _shards(urls)
    indices = list(range(0, TOTAL, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids = _read(Subset(shards, indices))
    kept = set(indices)
    assert ids == [i for i in window_order(COUNTS, SEED, 0, 1).tolist() if i in kept]
    stats = shards.stats()
    assert stats["shards_opened"] == len(COUNTS) and stats["samples_read"] == len(indices)


def test_a_subset_of_a_hiding_wrapper_is_warned_about(urls: list[str]) -> None:
    """The warning names the wrapper that hides the order, however deep."""
    with pytest.warns(UserWarning, match="Augmented wraps a ShardsDataset"):
        ids = _read(Subset(Augmented(_shards(urls)), range(0, TOTAL, 2)))
    assert sorted(ids) == list(range(0, TOTAL, 2))


def test_the_wrappers_given_by_target(urls: list[str]) -> None:
    """The same through ``_target_``: the plain wrapper warned about, the forwarding one in order."""
    inner = {
        "_target_": "loaderfactory.shards.ShardsDataset",
        "urls": urls,
        "open_shards": 2,
        "shuffle_window": 1,
    }
    with pytest.warns(UserWarning, match="Augmented wraps a ShardsDataset"):
        ids = _read(config={"dataset": {"_target_": f"{HERE}.Augmented", "dataset": inner}})
    assert sorted(ids) == list(range(TOTAL))
    forwarded = {"_target_": f"{HERE}.ForwardedAugmented", "dataset": inner}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _read(config={"dataset": forwarded}) == window_order(COUNTS, SEED, 0, 1).tolist()


@pytest.mark.parametrize(
    "case",
    ["stored order", "every shard stays open", "one window spans every shard", "another length"],
)
def test_no_warning_where_the_order_is_fine(urls: list[str], case: str) -> None:
    """Nothing is warned about or noted when a uniform order costs nothing more, or the wrapper
    maps indices in its own way."""
    options = {
        "every shard stays open": {"open_shards": len(COUNTS)},
        "one window spans every shard": {"shuffle_window": len(COUNTS)},
    }.get(case, {})
    shards = _shards(urls, **options)
    wrapper = Pairs(shards) if case == "another length" else Augmented(shards)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids = _read(wrapper, shuffle=case != "stored order")
    assert len(ids) == len(wrapper) and len(set(ids)) == len(ids)
    if case == "stored order":
        assert "note" not in shards.stats()


@pytest.mark.slow  # the command's first fork starts its interpreter: ~20 s on a loaded machine
@pytest.mark.usefixtures("cli_forks")
def test_the_command_reports_the_reopened_shards(urls: list[str], tmp_path: Path) -> None:
    """``loaderfactory`` over the hiding wrapper given by ``_target_``: the run's report.json and its
    printed table carry the note naming the fix."""
    from cli_forks import run_command

    (tmp_path / "lf_augmented.py").write_text(
        "class Augmented:\n"
        "    def __init__(self, dataset):\n        self.dataset = dataset\n"
        "    def __len__(self):\n        return len(self.dataset)\n"
        "    def __getitem__(self, index):\n        return {'cls': self.dataset[index]['cls']}\n"
    )
    folder = str(Path(urls[0]).parent) + "/"
    inner = (
        f"{{_target_: loaderfactory.shards.ShardsDataset, urls: '{folder}', open_shards: 2,"
        " shuffle_window: 1, progress: false}"
    )
    done = run_command(
        tmp_path,
        "run.progress=false",
        "~dataset",
        f"+dataset={{_target_: lf_augmented.Augmented, dataset: {inner}}}",
        "loader.shuffle=true",
        "loader.batch_size=4",
        f"hydra.run.dir={tmp_path / 'run'}",
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shards = json.loads((tmp_path / "run" / "report.json").read_text())["shards"]
    assert shards["samples_read"] == TOTAL and shards["shards_opened"] > 10 * len(COUNTS)
    assert "ForwardEpochOrder" in shards["note"]
    assert "shards: note" in done.stdout + done.stderr
