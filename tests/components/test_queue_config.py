"""The ``ram`` queue kind from config: spec rules, aliases, presets, Loader integration, CLI, telemetry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_forks import cli
from pydantic import ValidationError

import loaderfactory as lf
from loaderfactory.components.queue.dataset import QueueDataset
from loaderfactory.config.specs.queue import QueueDatasetSpec
from loaderfactory.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DATASET = {
    "kind": "synthetic",
    "length": 16,
    "fields": {"vol": {"shape": [1, 4, 4, 4]}, "tf_tex": {"shape": [2, 3]}},
}


def config(**queue: Any) -> dict[str, Any]:
    return {
        "dataset": DATASET,
        "queue": {"kind": "ram", "epoch_size": 5, "batch_size": 2, **queue},
        "seed": 1,
    }


def test_seed_names_are_aliases_in_yaml() -> None:
    """bs, q_maxlen, ram_use, epoch_len, sample_tfm, batch_tfm, preprocess_fn and collate_fn validate."""
    spec = QueueDatasetSpec.model_validate(
        {
            "bs": 4,
            "q_maxlen": 10,
            "ram_use": 0.7,
            "epoch_len": 50,
            "sample_tfm": {"kind": "rand_flip"},
            "batch_tfm": {"kind": "to_dtype", "dtype": "float16"},
            "preprocess_fn": {"kind": "normalize"},
            "collate_fn": {"kind": "dict", "key_filter": ["vol"]},
        }
    )
    assert (spec.batch_size, spec.capacity, spec.ram_budget, spec.epoch_size) == (4, 10, 0.7, 50)
    assert spec.collate.keys == ["vol"]


def test_ram_use_above_one_means_megabytes_in_yaml() -> None:
    """``ram_use: 1.5`` is 1.5 MB as in the seed, while ``ram_budget: 1.5`` is refused as ambiguous."""
    assert QueueDatasetSpec.model_validate({"ram_use": 1.5}).ram_budget == 1_500_000
    with pytest.raises(ValidationError, match=r"must be in \(0, 1\]"):
        QueueDatasetSpec.model_validate({"ram_budget": 1.5})


def test_alias_and_field_together_are_refused() -> None:
    """``bs`` next to ``batch_size`` is an error naming both."""
    with pytest.raises(ValidationError, match=r"bs\n.*names the same field as 'batch_size'"):
        QueueDatasetSpec.model_validate({"batch_size": 2, "bs": 3})


def test_cross_field_rules_point_at_the_field() -> None:
    """wait_fill above capacity and a multiprocessing context for threads are located at their fields."""
    with pytest.raises(ConfigError) as info:
        lf.validate(config(capacity=4, wait_fill=8, multiprocessing_context="spawn"))
    assert set(info.value.paths) == {"queue.wait_fill", "queue.multiprocessing_context"}
    assert "more items than capacity (4)" in str(info.value)


def test_wait_fill_zero_is_not_false() -> None:
    """``wait_fill: 0`` is refused rather than read as false."""
    with pytest.raises(ConfigError, match=r"queue\.wait_fill"):
        lf.validate(config(wait_fill=0))


@pytest.mark.parametrize("preset", ["ram", "slow_hdd"])
def test_queue_presets_compose_and_validate(preset: str) -> None:
    """Both queue presets compose with Hydra and validate; slow_hdd matches the seed's example."""
    spec = lf.validate(lf.compose([f"queue={preset}", "dataset=volumes"]))
    assert spec.queue.kind == "ram"
    if preset == "slow_hdd":
        q = spec.queue
        assert (q.mode, q.ram_budget, q.num_workers, q.batch_size, q.wait_fill) == ("always", 0.7, 4, 4, 16)
        assert q.collate.keys == ["vol", "tf_tex"]
        assert q.sample_transforms.apply_on == ["vol"]
        assert [t.kind for t in q.sample_transforms.transforms] == [
            "rand_permute",
            "rand_flip",
            "gaussian_noise",
        ]


def test_base_preset_lists_every_field() -> None:
    """conf/loaderfactory/queue/ram.yaml names every field of the spec, so any ``queue.x=`` override works."""
    from omegaconf import OmegaConf

    keys = set(OmegaConf.load(ROOT / "conf/loaderfactory/queue/ram.yaml"))
    assert keys == set(QueueDatasetSpec.model_fields)


def test_slow_hdd_example_runs_in_a_loader() -> None:
    """The seed's slow-HDD example builds and yields batches of only ``vol`` and ``tf_tex``."""
    cfg = lf.compose(
        [
            "queue=slow_hdd",
            "dataset=volumes",
            "dataset.delay_ms=0",
            "queue.epoch_size=6",
            "queue.num_workers=2",
        ]
    )
    with lf.build_loader(cfg) as loader:
        batches = list(loader)
    assert len(batches) == 6
    assert set(batches[0]) == {"vol", "tf_tex"}
    assert batches[0]["vol"].shape == (4, 1, 64, 64, 64)


def test_loader_with_queue_and_prefetch_passes_batches_through() -> None:
    """With a queue, the torch loader does not batch again and prefetch stacks on top; len is epoch_size."""
    with lf.build_loader({**config(), "prefetch": {"kind": "thread", "buffer_size": 2}}) as loader:
        assert isinstance(loader["queue"], QueueDataset)
        batches = list(loader)
        assert len(loader) == 5 and len(batches) == 5
        assert batches[0]["vol"].shape == (2, 1, 4, 4, 4)
        report = loader.telemetry()
    assert report["components"]["queue"]["draws"] == 5


def test_loader_refuses_options_that_make_no_sense_with_a_queue() -> None:
    """shuffle, drop_last and DataLoader workers are refused, each saying why."""
    cfg = {**config(), "loader": {"kind": "torch", "shuffle": True, "drop_last": True, "num_workers": 2}}
    with pytest.raises(ConfigError) as info:
        lf.build_loader(cfg)
    assert set(info.value.paths) == {"loader.shuffle", "loader.drop_last", "loader.num_workers"}
    assert "already samples at random" in str(info.value)
    assert "loads with its own workers" in str(info.value)


def test_queue_needs_a_map_style_dataset() -> None:
    """An iterable dataset object is refused at the dataset slot."""
    from torch.utils.data import IterableDataset

    class Stream(IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(range(3))

    with pytest.raises(ConfigError, match="dataset: the queue loads items by index"):
        lf.build_loader({"queue": {"kind": "ram"}}, dataset=Stream())


def test_telemetry_and_fill_level() -> None:
    """telemetry() reports sampling ratio, fill and age; fill_level() gives items and bytes held
    against capacity and budget while the queue runs, nothing before it starts."""
    with QueueDataset(
        lf.build_loader(config()).dataset, epoch_size=40, capacity=8, log_sampling=True, seed=0
    ) as q:
        assert q.fill_level() is None
        list(q)
        report = q.telemetry()
        level = q.fill_level()
        stages = q.stage_times()
    assert report["draws"] == 40 and report["fill_items"]["max"] == 8
    assert {"sampling_max_min_ratio", "never_drawn", "age_s", "peak_held_mb", "budget_mb"} <= set(report)
    assert level is not None
    assert (level["items"], level["capacity"], level["budget_bytes"]) == (report["qsize"], 8, q.budget)
    assert level["bytes"] == pytest.approx(report["held_mb"] * 1e6, abs=1e3)
    assert list(stages) == ["queue: first fill"] and stages["queue: first fill"] >= 0


@pytest.mark.usefixtures("cli_forks")  # forks the command instead of starting it
def test_cli_runs_the_seed_example_and_writes_its_figure(tmp_path: Path) -> None:
    """``loaderfactory queue=slow_hdd dataset=volumes`` runs and reports the queue's telemetry and figure."""
    out = tmp_path / "run"  # cli()'s hydra.run.dir
    example = ("queue=slow_hdd", "dataset=volumes", "dataset.delay_ms=1", "queue.num_workers=2")
    result = cli(tmp_path, *example, "run.batches=8", "run.progress=false")
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["components"]["queue"]["draws"] >= 8
    assert report["plots"] == [str(out / "report.png")] and (out / "report.png").is_file()
