"""The examples and benchmark scripts run as a user would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # every test starts interpreters that import torch (and pip, once)


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 180) -> str:
    result = subprocess.run(
        args, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_hydra_training_app_trains_on_loader_batches(tmp_path: Path) -> None:
    """The Hydra app composes our groups into `data`, builds the loader and trains a few steps."""
    out = run(
        [
            sys.executable,
            str(ROOT / "examples/train_hydra/train.py"),
            "steps=12",
            "data.prefetch.buffer_size=2",
            f"hydra.run.dir={tmp_path}/run",
        ],
        cwd=tmp_path,
    )
    assert "trained 12 steps on 16 batches/epoch" in out


def test_hydra_training_app_takes_a_preset_override(tmp_path: Path) -> None:
    """A preset of ours chosen on the app's command line (`loaderfactory/loader@data.loader=...`) is used."""
    out = run(
        [
            sys.executable,
            str(ROOT / "examples/train_hydra/train.py"),
            "steps=3",
            "loaderfactory/loader@data.loader=torch_workers",
            "data.loader.batch_size=16",
            f"hydra.run.dir={tmp_path}/run",
        ],
        cwd=tmp_path,
    )
    assert "trained 3 steps" in out


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin, pip-installed (entry point metadata included) into a private folder."""
    target = tmp_path_factory.mktemp("plugin_site")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(ROOT / "examples/plugin"),
        ],
        cwd=target,
    )
    return target


def test_plugin_kinds_are_selected_from_yaml_by_name(installed_plugin: Path, tmp_path: Path) -> None:
    """With the plugin installed, `dataset=sine` (its preset, found through the `loaderfactory.configs`
    entry point, no `--config-dir`) resolves `kind: sine_waves` through the `loaderfactory.plugins` one."""
    out = run(
        [
            sys.executable,
            "-m",
            "loaderfactory",
            "dataset=sine",
            "loader.batch_size=8",
            "run.batches=10",
            "run.progress=false",
            "run.plots=false",
            f"hydra.run.dir={tmp_path}/run",
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": os.pathsep.join([str(installed_plugin), str(ROOT)])},
    )
    assert "items  " in out or "items " in out
    assert (tmp_path / "run/report.json").is_file()


def test_plugin_fields_are_validated_like_builtins(installed_plugin: Path, tmp_path: Path) -> None:
    """A bad value for a plugin kind's field is a config error naming the path."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "loaderfactory",
            "dataset=sine",
            "dataset.buckets=0",
            "run.mode=validate",
            f"hydra.run.dir={tmp_path}/run",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(installed_plugin), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "dataset.buckets: must be ≥ 1, got 0" in result.stderr


def test_plugin_help_lists_its_preset_and_kinds(installed_plugin: Path, tmp_path: Path) -> None:
    """`loaderfactory --help` shows the installed plugin's preset and, under Kinds, its two kinds."""
    out = run(
        [sys.executable, "-m", "loaderfactory", "--help"],
        cwd=tmp_path,
        env={"PYTHONPATH": os.pathsep.join([str(installed_plugin), str(ROOT)])},
    )
    presets, kinds = out.split("== Kinds", 1)
    dataset_presets = next(line for line in presets.splitlines() if line.startswith("dataset: "))
    assert "sine" in dataset_presets.removeprefix("dataset: ").split(", ")  # among ours, in name order
    assert "sine_waves (loaderfactory_sine)" in kinds and "scale (loaderfactory_sine)" in kinds


def test_thread_buffer_benchmark_prints_its_table(tmp_path: Path) -> None:
    """The benchmark script runs and prints both of its tables (a smoke run, not a timing test)."""
    out = run([sys.executable, str(ROOT / "benchmarks/bench_thread_buffer.py"), "--quick"], cwd=tmp_path)
    assert "loaderfactory ThreadBuffer" in out
    assert "overlap efficiency" in out
