"""The command's output read by a program that stops early (``| head -1``): it ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cli_forks import ROOT


@pytest.mark.slow
@pytest.mark.parametrize(
    "args", [["run.mode=plan"], ["--help"], ["run.mode=schema"], ["run.mode=plan", "--cfg", "job"]]
)
def test_a_closed_stdout_ends_the_command_quietly(tmp_path: object, args: list[str]) -> None:
    """stdout's reader gone before the command writes (``loaderfactory run.mode=plan | head -1``, the
    worst case of it): no traceback, no ``BrokenPipeError``, the status of a Unix tool (141)."""
    read, write = os.pipe()
    os.close(read)  # no reader: the first write fails, whatever the size of the output
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "loaderfactory", *args],
            cwd=tmp_path,
            env=env,
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write)
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "Broken pipe" not in stderr, stderr
    assert stderr == "", stderr
    assert done.returncode == 141, stderr
