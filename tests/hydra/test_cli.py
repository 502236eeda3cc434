"""The ``loaderfactory`` command as users run it: a subprocess with Hydra overrides, sweeps and modes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_forks import QUICK, cli

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("cli_forks")


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
    assert report["plots"] == [str(tmp_path / "run" / "report.png")]
    assert (tmp_path / "run" / "report.png").stat().st_size > 0
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


def test_a_sweep_with_a_failed_job_exits_non_zero_with_a_summary(tmp_path: Path) -> None:
    """``-m loader.batch_size=0,4``: job 0 fails, job 1 runs; the sweep exits 1 and lists both jobs."""
    result = cli(tmp_path, "-m", *QUICK, "loader.batch_size=0,4", "run.batches=3")
    assert result.returncode == 1, result.stderr
    assert "loaderfactory: 2 jobs, 1 failed" in result.stderr
    lines = result.stderr.splitlines()
    (job0,) = [line for line in lines if line.startswith("  job 0: FAILED ")]
    (job1,) = [line for line in lines if line.startswith("  job 1: ok ")]
    assert "loader.batch_size=0 " in job0 and job0.endswith(": loader.batch_size: must be ≥ 1, got 0")
    assert "loader.batch_size=4 " in job1 and job1.endswith(" MiB") and "batches/s" in job1
    assert json.loads((tmp_path / "sweep" / "1" / "report.json").read_text())["batches"] == 3


def test_each_sweep_job_reports_its_own_peak_memory(tmp_path: Path) -> None:
    """A small job after a big one reports its own peak, not the process's peak so far."""
    big = "dataset.fields.image.shape=[3,256,256]"
    result = cli(tmp_path, "-m", *QUICK, "loader.batch_size=128,2", big, "run.batches=2", "~prefetch")
    assert result.returncode == 0, result.stderr
    peaks = [
        json.loads((tmp_path / "sweep" / str(n) / "report.json").read_text())["peak_rss_mb"] for n in (0, 1)
    ]
    assert peaks[0] > peaks[1] + 50, peaks  # a 96 MiB batch in job 0 only


def test_the_report_goes_to_the_job_log(tmp_path: Path) -> None:
    """Hydra's job log holds the report as well as the console."""
    result = cli(tmp_path, *QUICK, "run.batches=2")
    assert result.returncode == 0, result.stderr
    logs = list((tmp_path / "run").glob("*.log"))
    assert logs and "consumer wait per batch, p99" in logs[0].read_text()


@pytest.mark.parametrize("args", [["run.mode=validate"], ["run.mode=schema"], ["--help"]], ids=str)
def test_look_only_modes_import_no_torch_and_write_nothing(tmp_path: Path, args: list[str]) -> None:
    """``validate``, ``schema`` and ``--help`` leave the folder as it was and never import torch."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-X", "importtime", "-m", "loaderfactory", *args]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100)
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "torch" not in imported
    assert list(tmp_path.iterdir()) == []
