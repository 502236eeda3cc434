"""Entry-point plugins: an installed distribution registers its kinds under ``loaderfactory.plugins``."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from loaderfactory import available, build_loader
from loaderfactory.config import registry

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


def _fake_distribution(site: Path, name: str, entry_point: str) -> None:
    """Writes what ``pip install`` leaves behind: a ``*.dist-info`` with METADATA and entry_points.txt."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[loaderfactory.plugins]\n{name} = {entry_point}\n")


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on ``sys.path`` holding fake installed plugins; plugins are reloaded, then cleaned up."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_plugins_loaded", False)
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
