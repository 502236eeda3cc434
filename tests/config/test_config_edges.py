"""Config mistakes that are easy to get subtly wrong: one clear problem each, with the right path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_forks import cli
from omegaconf import OmegaConf

from loaderfactory import ConfigError, build_loader, compose, validate
from loaderfactory.config import registry

DATASET = {"kind": "synthetic", "length": 16, "fields": {"image": {"shape": [2]}}}


def problems(config: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        validate(config)
    return {p.path: p.message for p in info.value.problems}


def test_a_value_failing_both_branches_of_a_union_is_one_problem() -> None:
    """`wait_fill: 0` (bool or int ≥ 1) is one problem at `queue.wait_fill`, with no branch names."""
    found = problems({"dataset": DATASET, "queue": {"kind": "ram", "wait_fill": 0}})
    assert list(found) == ["queue.wait_fill"]
    assert "got 0" in found["queue.wait_fill"]


def test_a_bad_item_of_a_transform_list_is_located_by_its_index() -> None:
    """A list-or-single transform field points at the bad entry, not at the other branch's type."""
    config = {
        "dataset": DATASET,
        "queue": {"kind": "ram", "sample_transforms": [{"kind": "rand_flip", "p": 2}]},
    }
    assert list(problems(config)) == ["queue.sample_transforms.0.p"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("loader.shuffle", "yes"), ("loader.num_workers", True), ("seed", True), ("prefetch.copy_echoes", "n")],
)
def test_values_of_the_wrong_type_are_not_coerced(field: str, value: object) -> None:
    """Strict specs: `num_workers: true` or `shuffle: "yes"` are refused, not read as 1 and True."""
    cfg = compose([f"{field}={json.dumps(value) if isinstance(value, str) else str(value).lower()}"])
    assert field in problems(cfg)


@pytest.mark.parametrize("override", ["prefetch.timeout=inf", "run.step_ms=inf", "dataset.delay_ms=1e300"])
def test_infinite_and_huge_durations_are_refused(override: str) -> None:
    """An infinite timeout is written `null`; `inf` would crash a wait deep inside a run."""
    assert override.split("=")[0] in problems(compose([override]))


def test_every_missing_value_is_reported_at_once() -> None:
    """Several `???` values are listed together, each at its path."""
    cfg = compose(["loader.batch_size=???", "prefetch.buffer_size=???"])
    assert set(problems(cfg)) == {"loader.batch_size", "prefetch.buffer_size"}


def test_a_node_of_a_larger_config_reports_paths_from_its_root() -> None:
    """`validate(cfg.data)` in a user's app names `data.loader.batch_size`, not `loader.batch_size`."""
    cfg = OmegaConf.create({"data": {"dataset": DATASET, "loader": {"kind": "torch", "batch_size": 0}}})
    assert list(problems(cfg.data)) == ["data.loader.batch_size"]


def test_validate_checks_how_the_loader_follows_a_queue() -> None:
    """Rules across slots are checked by `validate`, not only when building."""
    found = problems(compose(["queue=ram", "loader.shuffle=true", "loader.num_workers=2"]))
    assert {"loader.shuffle", "loader.num_workers"} <= set(found)
    assert "loader.kind" in problems(compose(["queue=ram", "loader=sharded"]))


def test_the_torch_preset_follows_the_queue_batch_size() -> None:
    """With a queue the torch preset's batch size is the queue's, so the two never disagree silently."""
    assert validate(compose(["queue=ram", "queue.batch_size=6"])).loader.batch_size == 6
    found = problems(compose(["queue=ram", "queue.batch_size=6", "loader.batch_size=8"]))
    assert "queue.batch_size" in found["loader.batch_size"]


def test_kind_and_target_together_are_refused() -> None:
    """A dataset with both `kind` and `_target_` is ambiguous and refused at `_target_`."""
    found = problems({"dataset": {**DATASET, "_target_": "torch.utils.data.TensorDataset"}})
    assert "not both" in found["dataset._target_"]


def test_an_item_over_the_queue_budget_names_the_queue_field() -> None:
    """A budget only the data can break is reported at `queue.ram_budget` when the item is drawn."""
    cfg = compose(["queue=ram", "queue.ram_budget=1KiB", "queue.wait_fill=false", "dataset.length=8"])
    with build_loader(cfg) as loader, pytest.raises(ConfigError, match=r"queue\.ram_budget: item \d+ takes"):
        next(iter(loader))


@pytest.mark.usefixtures("cli_forks")  # forks the command instead of starting it
def test_a_sweep_goes_on_past_an_invalid_point(tmp_path: Path) -> None:
    """`-m loader.batch_size=0,8` fails the first job with a report of its problems, runs the second,
    and exits 1 because a job failed."""
    result = cli(
        tmp_path, "-m", "loader.batch_size=0,8", "run.batches=2", "run.progress=false", "run.plots=false"
    )
    assert result.returncode == 1, result.stderr
    failed = json.loads((tmp_path / "sweep" / "0" / "report.json").read_text())
    assert failed["problems"][0]["path"] == "loader.batch_size"
    assert json.loads((tmp_path / "sweep" / "1" / "report.json").read_text())["batches"] == 2


def test_a_plain_transform_with_an_option_is_not_handed_the_generator() -> None:
    """`f(item, factor=2.0)` is called as `f(item)`: only a required second argument gets the generator."""
    from loaderfactory.components.data.transforms import takes_generator

    def scale(item: dict[str, Any], factor: float = 2.0) -> dict[str, Any]:
        return item

    def seeded(item: dict[str, Any], generator: Any) -> dict[str, Any]:
        return item

    assert not takes_generator(scale)
    assert takes_generator(seeded)


def test_len_of_a_resumed_torch_loader_is_the_epochs() -> None:
    """A torch loader restored mid-epoch reports the epoch's length and yields the rest of it."""
    from loaderfactory.components.data.datasets import SyntheticDataset
    from loaderfactory.components.torch_loader import ResumableDataLoader

    dataset = SyntheticDataset(40, {"x": {"shape": [1]}})
    first = ResumableDataLoader(dataset, batch_size=4, shuffle=True, seed=0)
    batches = iter(first)
    for _ in range(3):
        next(batches)
    state = first.state_dict()
    second = ResumableDataLoader(dataset, batch_size=4, shuffle=True, seed=0)
    second.load_state_dict(state)
    assert len(second) == 10  # an epoch's length, as Lightning reads it after a restore
    assert sum(1 for _ in second) == 7
    assert len(second) == 10


def test_the_json_schema_accepts_every_shipped_preset_and_refuses_unknown_keys() -> None:
    """Editors using the schema agree with `validate`: presets pass, aliases pass, typos at the root fail."""
    jsonschema = pytest.importorskip("jsonschema")
    from loaderfactory.config.schema import json_schema

    checker = jsonschema.Draft202012Validator(json_schema())
    conf = Path(__file__).resolve().parents[2] / "conf" / "loaderfactory"
    for group in (slot for slot in registry.SLOTS if slot != "dataset"):
        for preset in sorted(p.stem for p in (conf / group).glob("*.yaml")):
            overrides = [f"{group}={preset}"] + (["dataset=volumes"] if group == "queue" else [])
            config = OmegaConf.to_container(compose(overrides), resolve=True)
            assert not list(checker.iter_errors(config)), (group, preset)
    plain = OmegaConf.to_container(compose([]), resolve=True)
    assert isinstance(plain, dict)
    assert not list(checker.iter_errors({**plain, "loader": {"kind": "torch", "bs": 4}}))
    assert list(checker.iter_errors({**plain, "bogus": 1}))
    assert list(checker.iter_errors({**plain, "loader": {"batch_size": 4}}))  # no kind
