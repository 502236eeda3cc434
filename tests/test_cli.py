"""The ``loaderfactory`` command as users run it: a subprocess with Hydra overrides, sweeps and modes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
QUICK = ["run.progress=false", "run.plots=false", "dataset.length=64", "loader.batch_size=8"]


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m loaderfactory ARGS`` from ``tmp_path``, with Hydra's output dirs inside it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [
        sys.executable,
        "-m",
        "loaderfactory",
        *args,
        f"hydra.run.dir={tmp_path / 'run'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100)


def test_run_with_overrides_writes_a_report(tmp_path: Path) -> None:
    """Overrides reach the loader; the report (stdout table and JSON) has the figures and the config."""
    result = cli(tmp_path, *QUICK, "prefetch.buffer_size=4", "run.batches=7", "run.plots=true")
    assert result.returncode == 0, result.stderr
    assert "batches/s" in result.stdout and "consumer wait per batch, p99" in result.stdout
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert (report["batches"], report["items"]) == (7, 56)
    for key in ("batches_per_s", "items_per_s", "wait_total_s", "wait_p50_ms", "wait_p99_ms", "peak_rss_mb"):
        assert isinstance(report[key], int | float), key
    assert report["config"]["prefetch"]["buffer_size"] == 4
    assert report["config"]["loader"]["batch_size"] == 8
    assert (tmp_path / "run" / "wait_hist.png").stat().st_size > 0
    assert f"report: {tmp_path / 'run' / 'report.json'}" in result.stdout


def test_removing_a_slot_and_running_epochs(tmp_path: Path) -> None:
    """``~prefetch`` drops the slot; without ``run.batches`` the run covers ``run.epochs`` epochs."""
    result = cli(tmp_path, *QUICK, "~prefetch", "run.epochs=2")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["config"]["prefetch"] is None
    assert (report["batches"], report["items"]) == (16, 128)


def test_validate_mode_lists_every_error_and_exits_2(tmp_path: Path) -> None:
    """``run.mode=validate`` prints every problem with its path and exits with status 2."""
    result = cli(
        tmp_path,
        "run.mode=validate",
        "loader.batch_size=0",
        "dataset.length=-3",
        "prefetch.kind=thred",
        "run.step_ms=-1",
    )
    assert result.returncode == 2, result.stderr
    assert "4 problems in the config" in result.stderr
    for expected in (
        "dataset.length: must be",
        "loader.batch_size: must be ≥ 1, got 0",
        "prefetch.kind: unknown prefetch kind 'thred'. Did you mean 'thread'?",
        "run.step_ms: must be ≥ 0.0, got -1",
    ):
        assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "report.json").exists()


def test_validate_mode_accepts_a_good_config(tmp_path: Path) -> None:
    """A valid config passes ``run.mode=validate`` without building or running anything."""
    result = cli(tmp_path, "run.mode=validate", "loader=torch_workers")
    assert result.returncode == 0, result.stderr
    assert "config OK" in result.stdout
    assert not (tmp_path / "run" / "report.json").exists()


def test_schema_mode_prints_a_json_schema(tmp_path: Path) -> None:
    """``run.mode=schema`` prints the JSON Schema of the configs, and nothing else, on stdout."""
    result = cli(tmp_path, "run.mode=schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"dataset", "loader", "prefetch", "run"} <= set(schema["properties"])
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema)


def test_multirun_sweep_writes_one_report_per_job(tmp_path: Path) -> None:
    """``-m prefetch.buffer_size=1,4`` runs two jobs, each with its own report."""
    result = cli(tmp_path, "-m", *QUICK, "prefetch.buffer_size=1,4", "run.batches=3")
    assert result.returncode == 0, result.stderr
    reports = sorted((tmp_path / "sweep").glob("*/report.json"))
    assert len(reports) == 2
    sizes = sorted(json.loads(p.read_text())["config"]["prefetch"]["buffer_size"] for p in reports)
    assert sizes == [1, 4]
    assert all(json.loads(p.read_text())["batches"] == 3 for p in reports)


def test_cfg_job_prints_the_composed_config(tmp_path: Path) -> None:
    """Hydra's ``--cfg job`` prints the composed config with overrides applied, and runs nothing."""
    result = cli(tmp_path, "--cfg", "job", "prefetch=echo", "loader.batch_size=5")
    assert result.returncode == 0, result.stderr
    cfg = yaml.safe_load(result.stdout)
    assert cfg["prefetch"] == {
        "kind": "thread",
        "buffer_size": 2,
        "timeout": None,
        "repeats": 2,
        "copy_echoes": True,
    }
    assert cfg["loader"]["batch_size"] == 5
    assert not (tmp_path / "run" / "report.json").exists()


def test_run_mode_with_a_bad_config_exits_2_without_a_traceback(tmp_path: Path) -> None:
    """A config that fails while building (a missing folder) is reported, not a traceback from inside."""
    result = cli(
        tmp_path, "dataset=tensor_folder", f"dataset.root={tmp_path / 'nowhere'}", "run.progress=false"
    )
    assert result.returncode == 2, result.stderr
    assert "dataset.root: tensor_folder:" in result.stderr and "is not a folder" in result.stderr
    assert "Traceback" not in result.stderr
