"""Entry-point plugins: an installed distribution registers its kinds under ``loaderfactory.plugins``
and adds its presets under ``loaderfactory.configs``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from loaderfactory import available, build_loader, compose
from loaderfactory.config import registry
from loaderfactory.hydra.compose import plugin_config_dirs

ROOT = Path(__file__).resolve().parents[2]

PLUGIN_MODULE = '''
"""A tiny third-party plugin: a dataset of the numbers 0..length-1 as dict items."""

from typing import Literal

import torch

import loaderfactory
from loaderfactory.config.specs.base import Spec

CALLS = []


class CountingSpec(Spec):
    kind: Literal["counting"] = "counting"
    length: int = 6


class Counting(torch.utils.data.Dataset):
    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return {"x": torch.tensor(float(index))}


def register_all():
    CALLS.append(1)
    loaderfactory.register(
        "dataset", "counting", CountingSpec, lambda spec, upstream, context: Counting(spec.length)
    )
'''


def _fake_distribution(site: Path, name: str, entry_point: str, configs: str | None = None) -> None:
    """Writes what ``pip install`` leaves behind: a ``*.dist-info`` with METADATA and entry_points.txt
    (``configs``: the value of a ``loaderfactory.configs`` entry point, ``"package:folder"``)."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    points = f"[loaderfactory.plugins]\n{name} = {entry_point}\n"
    if configs is not None:
        points += f"\n[loaderfactory.configs]\n{name} = {configs}\n"
    (info / "entry_points.txt").write_text(points)


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on ``sys.path`` holding fake installed plugins; plugins are reloaded, then cleaned up."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    registry._load_builtins()  # else the clean-up below would unregister them, loaded during the test
    before = {table: set(entries) for table, entries in registry._tables.items()}
    yield site
    for table, entries in registry._tables.items():
        for kind in set(entries) - before[table]:
            registry.unregister(table, kind)
    for module in [m for m in sys.modules if m.startswith("lf_test_plugin")]:
        del sys.modules[module]


def test_entry_point_plugin_registers_its_kind(plugin_site: Path) -> None:
    """After install, the plugin's kind is available and buildable by name, loaded exactly once."""
    (plugin_site / "lf_test_plugin.py").write_text(textwrap.dedent(PLUGIN_MODULE))
    _fake_distribution(plugin_site, "lf_test_plugin", "lf_test_plugin:register_all")
    assert "counting" in available("dataset")
    assert "counting" in available("dataset")  # a second look does not call the hook again
    assert sys.modules["lf_test_plugin"].CALLS == [1]
    config = {"dataset": {"kind": "counting", "length": 5}, "loader": {"kind": "torch", "batch_size": 2}}
    with build_loader(config) as loader:
        batches = [b["x"].tolist() for b in loader]
    assert batches == [[0.0, 1.0], [2.0, 3.0], [4.0]]


def test_plugin_kind_is_validated_like_a_builtin(plugin_site: Path) -> None:
    """A plugin spec's mistakes are ConfigErrors with dotted paths."""
    from loaderfactory import ConfigError, validate

    (plugin_site / "lf_test_plugin.py").write_text(textwrap.dedent(PLUGIN_MODULE))
    _fake_distribution(plugin_site, "lf_test_plugin", "lf_test_plugin:register_all")
    with pytest.raises(ConfigError, match=r"dataset\.length: must be a whole number, got 'six'"):
        validate({"dataset": {"kind": "counting", "length": "six"}})


def test_broken_plugin_fails_loudly_naming_it(plugin_site: Path) -> None:
    """A plugin whose hook raises is an ImportError naming the plugin and chaining the cause."""
    (plugin_site / "lf_test_plugin_broken.py").write_text(
        "def hook():\n    raise RuntimeError('no GPU here')\n"
    )
    _fake_distribution(plugin_site, "lf_test_plugin_broken", "lf_test_plugin_broken:hook")
    with pytest.raises(
        ImportError, match=r"plugin 'lf_test_plugin_broken' .* failed to load: no GPU here"
    ) as info:
        available("dataset")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_missing_plugin_module_fails_loudly(plugin_site: Path) -> None:
    """An entry point that points at a module that is not there names the plugin."""
    _fake_distribution(plugin_site, "lf_test_plugin_gone", "lf_test_plugin_gone_module:hook")
    with pytest.raises(ImportError, match="plugin 'lf_test_plugin_gone'"):
        available("prefetch")


def test_help_kinds_name_a_broken_plugin_and_list_the_rest(plugin_site: Path) -> None:
    """The Kinds section of ``--help`` survives a plugin whose hook raises: it names the plugin."""
    from loaderfactory.hydra.cli import kinds_help

    (plugin_site / "lf_test_plugin_broken.py").write_text("def hook():\n    raise RuntimeError('no GPU')\n")
    _fake_distribution(plugin_site, "lf_test_plugin_broken", "lf_test_plugin_broken:hook")
    text = kinds_help()
    assert "prefetch:  thread" in text.splitlines()
    assert text.endswith(
        "(some plugins' kinds are missing: loaderfactory plugin 'lf_test_plugin_broken' "
        "(lf_test_plugin_broken:hook) failed to load: no GPU)"
    )


PRESET_PLUGIN = "lf_test_plugin_presets"


def _preset_plugin(site: Path, configs: str = f"{PRESET_PLUGIN}:conf") -> Path:
    """An installed package with the ``counting`` kind and a ``dataset=counting6`` preset in its
    ``conf/loaderfactory/``; returns that ``conf`` folder."""
    package = site / PRESET_PLUGIN
    presets = package / "conf" / "loaderfactory" / "dataset"
    presets.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(PLUGIN_MODULE))
    (presets / "counting6.yaml").write_text("kind: counting\nlength: 6\n")
    _fake_distribution(site, PRESET_PLUGIN, f"{PRESET_PLUGIN}:register_all", configs=configs)
    return package / "conf"


def _cli(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "loaderfactory", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=100,
    )


def test_plugin_config_folders_are_found_without_importing_the_plugin(plugin_site: Path) -> None:
    """``plugin_config_dirs()`` resolves ``package:folder`` from the package's location alone."""
    conf = _preset_plugin(plugin_site)
    assert plugin_config_dirs() == [conf.resolve()]
    assert PRESET_PLUGIN not in sys.modules


def test_compose_picks_a_plugin_preset_without_config_dir(plugin_site: Path) -> None:
    """``compose(["dataset=<preset>"])`` finds an installed plugin's preset; its kind builds."""
    _preset_plugin(plugin_site)
    cfg = compose(["dataset=counting6", "loader.batch_size=4", "~prefetch"])
    assert cfg.dataset.kind == "counting"
    with build_loader(cfg) as loader:
        assert [b["x"].tolist() for b in loader] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0]]


def test_our_preset_wins_over_a_plugins_of_the_same_name(plugin_site: Path) -> None:
    """Plugins' folders come after ours: a plugin cannot change what ``dataset=synthetic`` means."""
    conf = _preset_plugin(plugin_site)
    (conf / "loaderfactory" / "dataset" / "synthetic.yaml").write_text("kind: counting\n")
    assert compose(["dataset=synthetic"]).dataset.kind == "synthetic"


def test_the_command_runs_a_plugin_preset_and_lists_plugin_kinds(plugin_site: Path, tmp_path: Path) -> None:
    """``loaderfactory dataset=<preset>`` works with no ``--config-dir``, and ``--help`` shows the
    plugin's preset and, in its Kinds section, the plugin's kind beside ours."""
    _preset_plugin(plugin_site)
    work = tmp_path / "work"
    work.mkdir()
    done = _cli(plugin_site, work, "dataset=counting6", "run.mode=validate")
    assert done.returncode == 0, done.stderr
    assert "config OK: dataset=counting, loader=torch, prefetch=thread" in done.stdout
    shown = _cli(plugin_site, work, "--help")
    assert shown.returncode == 0, shown.stderr
    presets, kinds = shown.stdout.split("== Kinds", 1)
    assert "dataset: counting6, " in presets
    kinds = kinds.split("== Config ==", 1)[0]
    kinds_shown = sorted({*available("dataset"), "counting"} - {"_target_"})  # ours and the plugin's
    listing = ", ".join(f"{k} ({PRESET_PLUGIN})" if k == "counting" else k for k in kinds_shown)
    assert f"dataset: {listing}, or a _target_" in " ".join(kinds.split())  # a long line wraps
    for table in registry.TABLES:
        listed = kinds.split(f"\n{table}:", 1)[1].split(":", 1)[0]
        assert all(kind in listed for kind in available(table) if kind != "_target_"), table
    assert list(work.iterdir()) == []


def test_an_unrelated_app_sees_plugin_presets_only_under_our_namespace(
    plugin_site: Path, tmp_path: Path
) -> None:
    """Another Hydra app composes ``/loaderfactory/dataset@...: <preset>``; its own groups gain nothing."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    _preset_plugin(plugin_site)
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.yaml").write_text(
        "defaults:\n  - /loaderfactory/dataset@data.dataset: counting6\n  - _self_\n"
    )
    with initialize_config_dir(config_dir=str(app), version_base="1.3"):
        assert hydra_compose(config_name="app").data.dataset == {"kind": "counting", "length": 6}
        loader = GlobalHydra.instance().config_loader()
        assert "counting6" in loader.get_group_options("loaderfactory/dataset")
        assert loader.list_groups("") == ["hydra", "loaderfactory"]  # no `dataset` group of ours
        assert set(loader.get_group_options("")) <= {"app", "_dummy_empty_config_"}  # no root config of ours


def test_a_missing_plugin_config_folder_is_an_error_naming_the_entry_point(
    plugin_site: Path, tmp_path: Path
) -> None:
    """An entry point naming a folder the package lacks fails compose and the command, naming it."""
    _preset_plugin(plugin_site, configs=f"{PRESET_PLUGIN}:nowhere")
    message = (
        rf"loaderfactory plugin '{PRESET_PLUGIN}' \(entry point loaderfactory\.configs: "
        rf"{PRESET_PLUGIN} = '{PRESET_PLUGIN}:nowhere'\): its config folder is missing"
    )
    with pytest.raises(FileNotFoundError, match=message):
        compose()
    done = _cli(plugin_site, tmp_path, "run.mode=validate")
    assert done.returncode == 1
    assert done.stderr.startswith(f"loaderfactory plugin '{PRESET_PLUGIN}' (entry point")
    assert "config folder is missing" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("configs", "setup", "error", "match"),
    [
        (f"{PRESET_PLUGIN}", None, ValueError, "expected '<package>:<folder in the package>'"),
        (
            "lf_test_plugin_absent:conf",
            None,
            FileNotFoundError,
            "'lf_test_plugin_absent' is not an installed",
        ),
        (f"{PRESET_PLUGIN}:conf/loaderfactory", None, FileNotFoundError, "has no loaderfactory/ folder"),
        (f"{PRESET_PLUGIN}:conf", "config.yaml", ValueError, "holds? only loaderfactory/.* sees? config"),
        (f"{PRESET_PLUGIN}:conf", "dataset", ValueError, "must hold only loaderfactory/.* dataset as"),
    ],
    ids=["no_folder_named", "no_package", "no_namespace", "stray_config", "stray_group"],
)
def test_a_malformed_plugin_config_entry_point_is_refused(
    plugin_site: Path, configs: str, setup: str | None, error: type[Exception], match: str
) -> None:
    """A bad value, a missing package or folders outside ``loaderfactory/`` (which every Hydra app would
    see as its own) are refused with the fix."""
    conf = _preset_plugin(plugin_site, configs=configs)
    if setup == "config.yaml":
        (conf / "config.yaml").write_text("a: 1\n")
    elif setup:
        (conf / setup).mkdir()
    with pytest.raises(error, match=match):
        plugin_config_dirs()
