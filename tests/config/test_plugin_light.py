"""The example plugin (``examples/plugin``) keeps look-only modes light: its builders import torch lazily."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_forks import ROOT

PLUGIN_SRC = ROOT / "examples" / "plugin" / "src"


@pytest.fixture
def plugin_env(tmp_path: Path) -> dict[str, str]:
    """An environment where the example plugin is installed: its entry points in a ``*.dist-info``
    (what ``pip install`` writes) and its source on ``PYTHONPATH``."""
    site = tmp_path / "site"
    info = site / "loaderfactory_sine-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: loaderfactory-sine\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[loaderfactory.plugins]\nsine = loaderfactory_sine:register_all\n\n"
        "[loaderfactory.configs]\nsine = loaderfactory_sine:conf\n"
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(PLUGIN_SRC), str(ROOT)])}


MODULES_AT_EXIT = """
import atexit, json, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted(sys.modules)), file=sys.__stderr__))
sys.argv[0] = "loaderfactory"
from loaderfactory.hydra.cli import main
main()
"""
"""The command, printing at exit which modules it imported."""


def _command(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", MODULES_AT_EXIT, *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=100)


def _imported(stderr: str) -> set[str]:
    (line,) = [line for line in stderr.splitlines() if line.startswith("MODULES ")]
    return set(json.loads(line.removeprefix("MODULES ")))


@pytest.mark.parametrize(
    "args",
    [["run.mode=validate"], ["run.mode=schema"], ["--cfg", "job"], ["--help"]],
    ids=["validate", "schema", "cfg", "help"],
)
def test_look_only_modes_with_the_plugin_import_no_torch(
    plugin_env: dict[str, str], tmp_path: Path, args: list[str]
) -> None:
    """``dataset=sine`` with a look-only mode loads the plugin (its specs) but never torch."""
    work = tmp_path / "work"
    work.mkdir()
    result = _command(plugin_env, work, "dataset=sine", "dataset.length=8", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    imported = _imported(result.stderr)
    assert "torch" not in imported
    if args != ["--cfg", "job"]:  # --cfg composes only; the others look the kinds up
        assert "loaderfactory_sine" in imported
    if args == ["run.mode=validate"]:
        assert result.stdout.startswith("config OK: dataset=sine_waves")


def test_the_plugin_still_builds_and_runs(plugin_env: dict[str, str], tmp_path: Path) -> None:
    """A run imports the builders (and torch) on first use and draws its batches."""
    result = _command(
        plugin_env,
        tmp_path,
        "dataset=sine",
        "dataset.length=16",
        "loader.batch_size=4",
        "run.progress=false",
        "run.plots=false",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"torch", "loaderfactory_sine.data"} <= _imported(result.stderr)
    assert (tmp_path / "run" / "report.json").is_file()
