"""Ctrl-C during a run: one line, exit 130, a partial report marked interrupted, the job log written,
no worker left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from cli_forks import ROOT
from command_process import read_until, start_command

PROGRESS = re.compile(rb"\|\s*[1-9]\d*/100000 ")
"""tqdm's progress once at least one batch is drawn: ``  0%|   | 12/100000 [...]``."""


def _wait_for_progress(process: subprocess.Popen[bytes], timeout: float = 90.0) -> bytes:
    """stderr until tqdm shows a batch drawn; fails past ``timeout`` or if the process ends first."""
    assert process.stderr is not None
    return read_until(process.stderr.fileno(), PROGRESS.search, "progress", timeout)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_ctrl_c_writes_a_partial_report_and_exits_130(tmp_path: Path) -> None:
    """SIGINT mid-run: ``interrupted after N batches; partial report in <path>`` as the last line,
    exit 130, no traceback, the report and the job log written, both worker processes gone."""
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "loaderfactory",
        "loader=torch_workers",
        "run.batches=100000",
        "run.step_ms=5",
        "run.plots=false",
        f"hydra.run.dir={run_dir}",
    ]
    process = start_command(command, tmp_path)
    try:
        before = _wait_for_progress(process)
        workers = [child.pid for child in psutil.Process(process.pid).children(recursive=True)]
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    stderr = (before + err).decode()
    assert process.returncode == 130, stderr[-3000:]
    assert len(workers) == 2 and all(_gone(pid) for pid in workers), workers
    last = stderr.strip().splitlines()[-1]
    found = re.fullmatch(r"loaderfactory: interrupted after (\d+) batches; partial report in (.+)", last)
    assert found, last
    assert "Traceback" not in stderr
    report = json.loads(Path(found[2]).read_text())
    assert Path(found[2]) == run_dir / "report.json"
    assert report["interrupted"] is True and report["batches"] == int(found[1]) >= 1
    assert report["items"] == 32 * report["batches"] and report["batches_per_s"] > 0
    assert report["stage"] == "drawing batches" and report["built"] == ["dataset", "loader", "prefetch"]
    (log,) = run_dir.glob("*.log")
    assert "interrupted (Ctrl-C)" in log.read_text() and "partial report: " in log.read_text()
    assert "interrupted (Ctrl-C)" in out.decode()


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # ended, or no /proc
        return ""


def _interrupt_when(
    process: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float = 90.0
) -> None:
    """SIGINT ``process`` as soon as ``ready()`` (what the process has loaded or written, seen from
    outside), polled until ``timeout``; fails if the process ends first."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, f"the command ended first: {process.communicate()[1].decode()[-3000:]}"
        assert time.monotonic() < deadline, f"not ready in {timeout} s"
        time.sleep(0.005)  # polling another process's state: there is no event to wait on
    process.send_signal(signal.SIGINT)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="moments are told by /proc/<pid>/maps")
@pytest.mark.parametrize("moment", ["starting", "importing torch", "workers starting"])
def test_ctrl_c_at_any_moment_ends_in_one_line_and_130(tmp_path: Path, moment: str) -> None:
    """SIGINT while the command's modules load (before Hydra made the output folder), while torch
    is imported for the build, and as the prefetch thread forks the first worker (before any batch;
    this hung, or printed a half-made iterator's traceback): one line on stderr, no traceback, exit
    130, no INFO lines from torch at exit; a report marked interrupted, with its stage and the slots
    built, where the output folder existed."""
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "loaderfactory",
        "dataset=slow_disk",
        "loader=torch_workers",
        "run.plots=false",
        f"hydra.run.dir={run_dir}",
    ]
    process = start_command(command, tmp_path)
    pid = process.pid

    def ready() -> bool:
        if moment == "starting":  # Hydra and pydantic loading: the app's modules, no folder yet
            return "pydantic_core" in _maps(pid)
        if moment == "importing torch":
            return "libtorch_cpu" in _maps(pid) and run_dir.is_dir()  # imported inside the job
        return bool(psutil.Process(pid).children())  # the first worker forked

    try:
        _interrupt_when(process, ready)
        existed = run_dir.exists()
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    stderr = err.decode()
    assert process.returncode == 130, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip() and "batch/s" not in line]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert "][torch." not in out.decode(), out.decode()  # torch's loggers at exit ("FakeTensor cache stats")
    if moment == "starting":
        assert not existed
        assert lines[0] == (
            "loaderfactory: interrupted while starting, before the run had an output folder: no report"
        )
        assert not (run_dir / "report.json").exists()
        return
    found = re.fullmatch(r"loaderfactory: interrupted after (\d+) batches; partial report in (.+)", lines[0])
    assert found, lines[0]
    report = json.loads(Path(found[2]).read_text())
    assert report["interrupted"] is True and report["batches"] == 0 and report["batches_per_s"] == 0.0
    if moment == "importing torch":
        assert (report["stage"], report["built"]) == ("building", []), report
    else:
        assert (report["stage"], report["built"]) == ("drawing batches", ["dataset", "loader", "prefetch"])


INTERRUPT_AFTER_IMPORT = """
import importlib.abc, os, signal, sys

class _InterruptAfter(importlib.abc.MetaPathFinder):
    \"\"\"SIGINT to this process as soon as MODULE is imported (by whoever imports it).\"\"\"

    def find_spec(self, name, path, target=None):
        if name == os.environ["LF_TEST_INTERRUPT_AFTER"] and self in sys.meta_path:
            sys.meta_path.remove(self)
            module = __import__(name, fromlist=["_"])
            os.kill(os.getpid(), signal.SIGINT)
            return module.__spec__
        return None

sys.meta_path.insert(0, _InterruptAfter())
"""
"""A ``sitecustomize`` that interrupts the command right after it imports a given module."""


@pytest.mark.slow
def test_ctrl_c_while_torch_is_imported_prints_no_torch_logging_at_exit(tmp_path: Path) -> None:
    """Ctrl-C right after torch registered its FakeTensor ``atexit`` report, in the middle of
    ``import torch``: no "FakeTensor cache stats" INFO lines (torch's loggers, left unconfigured,
    reached Hydra's root logger); one line, exit 130, a report marked interrupted while building."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(INTERRUPT_AFTER_IMPORT)
    run_dir = tmp_path / "run"
    path = os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "LF_TEST_INTERRUPT_AFTER": "torch._subclasses.fake_tensor"}
    done = subprocess.run(
        [sys.executable, "-m", "loaderfactory", "run.plots=false", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert "FakeTensor" not in out and "][torch." not in out, out
    assert done.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("loaderfactory: interrupted after 0 batches; partial report in ")
    )
    report = json.loads((run_dir / "report.json").read_text())
    assert (report["interrupted"], report["stage"], report["built"]) == (True, "building", [])
