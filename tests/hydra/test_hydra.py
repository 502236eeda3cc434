"""Hydra edge: packaged configs compose, every shipped preset validates, instantiate returns a Loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from loaderfactory import (
    ConfigError,
    Loader,
    LoaderSpec,
    build_loader,
    compose,
    config_dir,
    validate,
)
from loaderfactory.components.data.datasets import SyntheticDataset
from loaderfactory.config import registry

CONF = config_dir() / "loaderfactory"
PRESETS = sorted(
    (group.name, path.stem)
    for group in CONF.iterdir()
    if group.is_dir() and not group.name.startswith((".", "_"))
    for path in group.glob("*.yaml")
)


def fill_mandatory(group: str, kind: str, missing: list[str], folder: Path) -> list[str]:
    """Values for a preset's ``???`` keys, from its kind's contract (which sets them to build it)."""
    contracts = registry.lookup(group, kind).contracts  # type: ignore[arg-type]  # groups are slots
    given = {o.split("=", 1)[0]: o for o in (contracts[0].overrides(folder) if contracts else []) if "=" in o}
    unknown = [key for key in missing if key not in given]
    assert not unknown, f"{group} {kind!r}: its contract sets no value for {unknown}; add one to it"
    return [given[key] for key in missing]


SMALL = ["dataset.length=16", "loader.batch_size=4"]


def test_config_dir_holds_only_our_namespace() -> None:
    """The folder on Hydra's search path holds ``loaderfactory/`` only: the command's root config
    (``cli.yaml``, no ``config.yaml`` another app could pick up) and a group per built-in slot."""
    assert [p.name for p in config_dir().iterdir()] == ["loaderfactory"]
    assert (CONF / "cli.yaml").is_file() and not (CONF / "config.yaml").exists()
    assert {"dataset", "loader", "prefetch"} <= {p.name for p in CONF.iterdir() if p.is_dir()}


def test_compose_gives_the_default_pipeline() -> None:
    """The root config composes to synthetic data, a torch loader and a thread prefetch."""
    cfg = compose()
    assert isinstance(cfg, DictConfig)
    assert (cfg.dataset.kind, cfg.loader.kind, cfg.prefetch.kind) == ("synthetic", "torch", "thread")
    assert cfg.get("queue") is None and cfg.get("stream") is None
    spec = validate(cfg)
    assert isinstance(spec, LoaderSpec)


def test_compose_applies_overrides_and_removals() -> None:
    """Command-line style overrides set fields, pick presets and drop optional slots."""
    spec = validate(
        compose(["prefetch.buffer_size=8", "loader=torch_workers", "loader.batch_size=3", "seed=4"])
    )
    assert spec.prefetch.buffer_size == 8
    assert (spec.loader.num_workers, spec.loader.batch_size, spec.seed) == (2, 3, 4)
    assert validate(compose(["~prefetch"])).prefetch is None


def test_compose_refuses_unknown_keys_in_struct_mode() -> None:
    """A misspelt override is refused by Hydra at compose time, before anything is built."""
    with pytest.raises(Exception, match="buffer_sise"):
        compose(["prefetch.buffer_sise=3"])


@pytest.mark.parametrize(("group", "preset"), PRESETS, ids=[f"{g}/{p}" for g, p in PRESETS])
def test_every_shipped_preset_composes_and_validates(group: str, preset: str, tmp_path: Path) -> None:
    """Each YAML under conf/<group>/ composes into the root config and validates (``???`` keys filled)."""
    cfg = compose([f"{group}={preset}"])
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        with pytest.raises(ConfigError, match=r"is '\?\?\?' \(mandatory\)") as info:
            validate(cfg)
        assert info.value.paths[0] in missing
        fills = fill_mandatory(group, cfg[group].kind, missing, tmp_path)
        cfg = compose([f"{group}={preset}", *fills])
    spec = validate(cfg)
    assert spec.slot(group) is not None
    kind = getattr(spec.slot(group), "kind", None)
    assert kind in registry.available(group)  # type: ignore[arg-type]


def _base_presets() -> list[tuple[str, Path]]:
    """Presets that extend nothing: they must list every field of their kind's spec."""
    found = []
    for group, preset in PRESETS:
        path = CONF / group / f"{preset}.yaml"
        data = yaml.safe_load(path.read_text()) or {}
        if "defaults" not in data and group in registry.SLOTS:
            found.append((group, path))
    return found


PRESET_CHOICES = {("loader", "sharded.yaml"): {"batch_size"}, ("loader", "torch.yaml"): {"batch_size"}}
"""Fields a base preset sets on purpose: sharded's spec leaves the batch size open (or a batch
sampler); torch's preset follows the queue's batch size when there is a queue."""


@pytest.mark.parametrize(("group", "path"), _base_presets(), ids=lambda v: getattr(v, "name", v))
def test_base_presets_list_every_field_with_its_default(group: str, path: Path) -> None:
    """A standalone preset lists every field; the one named after its kind holds the defaults."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    spec_cls = registry.lookup(group, data["kind"]).spec  # type: ignore[arg-type]
    assert set(data) == set(spec_cls.model_fields), f"{path.name}: fields differ from {spec_cls.__name__}"
    for name, field in spec_cls.model_fields.items():
        if field.is_required():
            assert data[name] == "???", f"{path.name}: required field {name} should be '???'"
            continue
        if path.stem != data["kind"] or name in PRESET_CHOICES.get((group, path.name), set()):
            continue  # only the preset named after its kind must hold the spec's defaults
        default = field.get_default(call_default_factory=True)
        dumped = default.model_dump(mode="json") if hasattr(default, "model_dump") else default
        if isinstance(dumped, dict):
            dumped = {
                k: v.model_dump(mode="json") if hasattr(v, "model_dump") else v for k, v in dumped.items()
            }
        assert data[name] == dumped, (
            f"{path.name}: {name} is {data[name]!r}, the spec's default is {dumped!r}"
        )


def test_interpolations_resolve_before_validation() -> None:
    """``${...}`` in overrides or YAML is resolved, so the spec holds the referenced value."""
    spec = validate(compose(["seed=11", "dataset.seed=${seed}", "loader.batch_size=${dataset.length}"]))
    assert spec.dataset.seed == 11
    assert spec.loader.batch_size == spec.dataset.length


def test_mandatory_value_fails_loudly_naming_its_path() -> None:
    """A ``???`` left unset is a ConfigError at its dotted path, never the string '???'."""
    cfg = compose(["dataset=tensor_folder"])
    with pytest.raises(
        ConfigError, match=r"^dataset\.root: is '\?\?\?' \(mandatory\) and was never set"
    ) as info:
        build_loader(cfg)
    assert info.value.paths == ["dataset.root"]


def test_instantiate_root_config_returns_a_loader() -> None:
    """``hydra.utils.instantiate`` on the shipped root config builds a ready Loader."""
    loader = instantiate(compose(SMALL))
    with loader:
        assert isinstance(loader, Loader)
        assert list(loader.components) == ["dataset", "loader", "prefetch"]
        assert len(list(loader)) == len(loader) == 4


def test_instantiate_with_a_dataset_object() -> None:
    """``instantiate(cfg, dataset=obj)`` uses the object built in code."""
    dataset = SyntheticDataset(6)
    with instantiate(compose(SMALL), dataset=dataset) as loader:
        assert loader.dataset is dataset
        assert len(list(loader)) == 2


def test_instantiate_reports_config_errors() -> None:
    """A bad value surfaces as our ConfigError (Hydra wraps it), naming the path."""
    with pytest.raises(InstantiationException, match=r"prefetch\.buffer_size: must be ≥ 1, got 0") as info:
        instantiate(compose(["prefetch.buffer_size=0"]))
    assert isinstance(info.value.__cause__, ConfigError)
    with pytest.raises(InstantiationException, match=r"dataset\.root: is '\?\?\?'"):
        instantiate(compose(["dataset=tensor_folder"]))


def test_external_app_composes_our_groups(tmp_path: Path) -> None:
    """A user's Hydra app pulls our presets into its own tree through the search-path plugin."""
    (tmp_path / "app.yaml").write_text(
        "defaults:\n"
        "  - /loaderfactory/dataset@data.dataset: synthetic\n"
        "  - /loaderfactory/loader@data.loader: torch\n"
        "  - /loaderfactory/prefetch@data.prefetch: echo\n"
        "  - _self_\n"
        "data:\n"
        "  dataset: {length: 12}\n"
        "  loader: {batch_size: 6}\n"
    )
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        cfg = hydra_compose(config_name="app")
    with build_loader(cfg.data) as loader:
        assert loader["prefetch"].repeats == 2
        assert len(list(loader)) == len(loader) == 4


UNRELATED_APP = """
import sys
import hydra
from omegaconf import OmegaConf

plugin, empty = sys.argv.pop(1), sys.argv.pop(1)
if plugin == "without":  # stand-in for an environment without loaderfactory: an empty folder
    import loaderfactory.hydra.compose as ours
    ours.config_dir = lambda: ours.Path(empty)

@hydra.main(config_path="conf", config_name=sys.argv.pop(1) or None, version_base="1.3")
def main(cfg):
    print(OmegaConf.to_yaml(cfg))

main()
"""


def _run_unrelated_app(tmp_path: Path, plugin: str, config_name: str, *overrides: str) -> str:
    import subprocess
    import sys

    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    command = [sys.executable, "app.py", plugin, str(empty), config_name, *overrides, "hydra.run.dir=out"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    # A "cannot find the primary config" error lists the search path: ours is a path in it, by design.
    lines = (done.stdout + done.stderr).splitlines()
    return "\n".join([f"exit {done.returncode}", *(n for n in lines if "provider=loaderfactory" not in n)])


@pytest.mark.parametrize(
    ("config_name", "overrides"),
    [
        ("", ()),
        ("", ("dataset=mine",)),
        ("", ("dataset=synthetic",)),
        ("config", ()),
        ("", ("loader=torch",)),
    ],
    ids=["empty", "own_group", "our_preset_name", "no_config_yaml", "our_group_name"],
)
def test_an_unrelated_app_behaves_as_without_loaderfactory(
    tmp_path: Path, config_name: str, overrides: tuple[str, ...]
) -> None:
    """An app with its own ``dataset`` group and no ``config.yaml`` composes exactly as if we were absent:
    ``dataset=synthetic`` is not found, no root config of ours is picked up."""
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "dataset" / "mine.yaml").write_text("name: mine\n")
    (tmp_path / "app.py").write_text(UNRELATED_APP)
    with_us = _run_unrelated_app(tmp_path, "with", config_name, *overrides)
    assert with_us == _run_unrelated_app(tmp_path, "without", config_name, *overrides)
    assert "loaderfactory" not in with_us


def test_an_unrelated_apps_help_gains_only_our_namespace(tmp_path: Path) -> None:
    """Its ``--help`` lists its own groups as before; ours appear only under ``loaderfactory/``."""
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "dataset" / "mine.yaml").write_text("name: mine\n")
    (tmp_path / "app.py").write_text(UNRELATED_APP)
    with_us = _run_unrelated_app(tmp_path, "with", "", "--help").splitlines()
    without = _run_unrelated_app(tmp_path, "without", "", "--help").splitlines()
    added = [line for line in with_us if line not in without]
    assert added and all(line.startswith("loaderfactory") for line in added)
    assert "dataset: mine" in with_us
