"""build_loader and Loader: config forms, dataset objects, len() equal to what an epoch yields, close."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, IterableDataset

from loaderfactory import ConfigError, Loader, ThreadBuffer, build_loader, validate
from loaderfactory.components.data.datasets import SyntheticDataset

SMALL = {"kind": "synthetic", "length": 10, "fields": {"x": {"shape": [2]}}}


def config(**slots: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"dataset": SMALL, "loader": {"kind": "torch", "batch_size": 4}}
    base.update(slots)
    return {k: v for k, v in base.items() if v is not None}


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("loaderfactory-prefetch")]


def test_builds_the_slots_in_pipeline_order() -> None:
    """dataset → loader → prefetch, each component wrapping the one before."""
    with build_loader(config(prefetch={"kind": "thread", "buffer_size": 2})) as loader:
        assert list(loader.components) == ["dataset", "loader", "prefetch"]
        assert isinstance(loader["dataset"], SyntheticDataset)
        assert isinstance(loader["loader"], DataLoader) and loader["loader"].dataset is loader.dataset
        assert isinstance(loader["prefetch"], ThreadBuffer) and loader["prefetch"].src is loader["loader"]
        assert loader.output is loader["prefetch"]
        assert (
            repr(loader)
            == "Loader(dataset=SyntheticDataset → loader=ResumableDataLoader → prefetch=ThreadBuffer)"
        )


def test_empty_optional_slot_is_absent() -> None:
    """Without a prefetch slot the loader's output is the DataLoader itself."""
    with build_loader(config()) as loader:
        assert list(loader.components) == ["dataset", "loader"]
        with pytest.raises(
            KeyError, match="no component in slot 'prefetch'; this loader has dataset, loader"
        ):
            loader["prefetch"]


def test_every_config_form_builds_the_same_loader(tmp_path: Path) -> None:
    """A dict, YAML path, OmegaConf node and validated spec all build equal pipelines."""
    data = config(prefetch={"kind": "thread"})
    path = tmp_path / "loader.yaml"
    path.write_text(OmegaConf.to_yaml(data))
    with build_loader(data) as loader:
        expected = [b["index"].tolist() for b in loader]
    for form in (path, str(path), OmegaConf.create(data), validate(data)):
        with build_loader(form) as loader:
            assert [b["index"].tolist() for b in loader] == expected


def test_dataset_object_takes_the_place_of_the_dataset_slot() -> None:
    """``build_loader(cfg, dataset=obj)`` uses the object; the config needs no dataset slot."""
    items = [{"v": torch.tensor(float(i))} for i in range(5)]
    with build_loader({"loader": {"kind": "torch", "batch_size": 2}}, dataset=items) as loader:
        assert loader.dataset is items
        assert [b["v"].tolist() for b in loader] == [[0.0, 1.0], [2.0, 3.0], [4.0]]


def test_dataset_object_wins_over_a_configured_dataset() -> None:
    """A dataset passed in code replaces the one the config names."""
    obj = SyntheticDataset(3)
    with build_loader(config(), dataset=obj) as loader:
        assert loader.dataset is obj
        assert len(loader) == 1


@pytest.mark.parametrize(
    ("length", "batch_size", "drop_last", "repeats", "prefetch"),
    [
        (10, 4, False, 1, False),
        (10, 4, True, 1, False),
        (10, 4, False, 1, True),
        (10, 4, True, 3, True),
        (9, 3, True, 2, True),
        (1, 4, False, 2, True),
    ],
)
def test_len_equals_the_batches_an_epoch_yields(
    length: int, batch_size: int, drop_last: bool, repeats: int, prefetch: bool
) -> None:
    """``len(loader)`` is what iterating yields (drop_last and echoes counted), and the stats agree."""
    cfg = {
        "dataset": {**SMALL, "length": length},
        "loader": {"kind": "torch", "batch_size": batch_size, "drop_last": drop_last},
    }
    if prefetch:
        cfg["prefetch"] = {"kind": "thread", "repeats": repeats}
    with build_loader(cfg) as loader:
        batches = list(loader)
        assert len(loader) == len(batches)
        assert loader.stats.batches == len(batches)
        assert loader.stats.items == sum(len(b["index"]) for b in batches)
        assert len(loader.stats.waits) == len(batches)


def test_stats_accumulate_over_epochs_and_reset() -> None:
    """Each full epoch adds its batches to the stats and counts as an epoch; ``reset`` starts over."""
    with build_loader(config(prefetch={"kind": "thread"})) as loader:
        for _ in range(2):
            assert len(list(loader)) == 3
        assert (loader.epoch, loader.stats.batches, loader.stats.items) == (2, 6, 20)
        loader.stats.reset()
        assert (loader.stats.batches, loader.stats.items, loader.stats.waits) == (0, 0, [])


def test_telemetry_reports_the_headline_figures() -> None:
    """``telemetry()`` has counts, throughput, wait percentiles and memory, as plain numbers."""
    with build_loader(config()) as loader:
        list(loader)
        report = loader.telemetry()
    assert report["batches"] == 3 and report["items"] == 10
    for key in (
        "wall_s",
        "batches_per_s",
        "items_per_s",
        "wait_total_s",
        "wait_p50_ms",
        "wait_p99_ms",
        "peak_rss_mb",
    ):
        assert isinstance(report[key], int | float), key
    assert report["wait_p50_ms"] <= report["wait_p99_ms"]
    assert "components" not in report


def test_component_telemetry_is_merged_by_slot() -> None:
    """A component with ``telemetry()`` appears under ``components.<slot>``."""

    class Reporting(SyntheticDataset):
        def telemetry(self) -> dict[str, int]:
            return {"reads": 42}

    with build_loader(config(), dataset=Reporting(4)) as loader:
        list(loader)
        assert loader.telemetry()["components"] == {"dataset": {"reads": 42}}


def test_telemetry_before_any_batch() -> None:
    """A loader that has yielded nothing still reports zeros rather than failing."""
    with build_loader(config()) as loader:
        report = loader.telemetry()
    assert (report["batches"], report["items"], report["batches_per_s"]) == (0, 0, None)


def test_close_twice_and_iterate_after_close() -> None:
    """``close()`` is idempotent, and a closed loader refuses a new epoch."""
    loader = build_loader(config(prefetch={"kind": "thread"}))
    next(iter(loader))
    loader.close()
    loader.close()
    assert prefetch_threads() == []
    with pytest.raises(RuntimeError, match="this Loader is closed"):
        iter(loader)


def test_with_block_stops_the_prefetch_thread_mid_epoch() -> None:
    """Leaving a ``with`` block in the middle of an epoch stops the prefetch thread."""
    with build_loader(config(prefetch={"kind": "thread", "buffer_size": 2})) as loader:
        it = iter(loader)
        next(it)
        assert prefetch_threads()
    assert prefetch_threads() == []
    del it


def test_early_break_leaves_no_thread() -> None:
    """Breaking out of an epoch stops the prefetch thread at once."""
    with build_loader(config(prefetch={"kind": "thread"})) as loader:
        for _ in loader:
            break
        assert prefetch_threads() == []
        assert loader.epoch == 0


def test_shuffle_is_seeded() -> None:
    """With a root seed, shuffled order repeats from build to build and changes with the seed."""

    def order(seed: int) -> list[int]:
        cfg = {
            "dataset": {**SMALL, "length": 30},
            "loader": {"kind": "torch", "batch_size": 30, "shuffle": True},
        }
        with build_loader({**cfg, "seed": seed}) as loader:
            return [int(i) for i in next(iter(loader))["index"]]

    assert order(1) == order(1)
    assert order(1) != order(2)
    assert sorted(order(1)) == list(range(30))


def test_loader_seed_overrides_the_root_seed() -> None:
    """``loader.seed`` wins over the root ``seed``."""

    def order(root: int, own: int | None) -> list[int]:
        loader_cfg = {"kind": "torch", "batch_size": 30, "shuffle": True, "seed": own}
        with build_loader({"dataset": {**SMALL, "length": 30}, "loader": loader_cfg, "seed": root}) as loader:
            return [int(i) for i in next(iter(loader))["index"]]

    assert order(1, 5) == order(2, 5) == order(5, None)


def test_failure_in_the_first_slot_is_the_config_error() -> None:
    """A dataset that cannot be built raises its ConfigError (nothing was started to clean up)."""
    with pytest.raises(ConfigError, match=r"dataset\.root: .*is not a folder") as info:
        build_loader({"dataset": {"kind": "tensor_folder", "root": "/no/such/folder"}})
    assert info.value.paths == ["dataset.root"]


def test_failure_in_a_later_slot_is_a_config_error_at_that_slot() -> None:
    """A slot refusing its upstream is reported at the slot's own field."""

    class Stream(IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(range(3))

    with pytest.raises(ConfigError, match=r"loader\.shuffle: cannot shuffle an iterable dataset") as info:
        build_loader({"loader": {"kind": "torch", "shuffle": True}}, dataset=Stream())
    assert info.value.paths == ["loader.shuffle"]


def test_invalid_config_starts_nothing() -> None:
    """Validation fails before any component or thread exists."""
    before = threading.active_count()
    with pytest.raises(ConfigError):
        build_loader(config(prefetch={"kind": "thread", "buffer_size": 0}))
    assert threading.active_count() == before


def test_loader_needs_a_component() -> None:
    """A Loader over nothing is a programming error."""
    with pytest.raises(ValueError, match="needs at least one component"):
        Loader({})


def test_worker_processes_yield_the_same_batches_and_are_released() -> None:
    """With worker processes the batches are the same as in-process, and close() ends the workers."""
    cfg = config(prefetch={"kind": "thread"})
    with build_loader(cfg) as loader:
        expected = [b["index"].tolist() for b in loader]
    workers = {"num_workers": 2, "persistent_workers": True, "multiprocessing_context": "fork"}
    cfg["loader"] = {**cfg["loader"], **workers}
    with build_loader(cfg) as loader:
        assert [b["index"].tolist() for b in loader] == expected
        it = iter(loader)
        next(it)
    del it
