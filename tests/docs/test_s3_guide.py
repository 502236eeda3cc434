"""docs/guides/s3.md runs as written: the server command, pack, index, read, the Python resume, the stop.

Two changes to what a reader types, both forced by a shared test machine: the server gets
``--port 0`` (any free port; 8333 may be taken), so the guide's ``8333`` is read as the port it
printed; and ``loaderfactory`` runs as ``python -m loaderfactory`` from this checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_forks import ROOT
from command_process import finish
from process_checks import alive, kill_survivors
from s3_server_command import start_server

GUIDE = (ROOT / "docs" / "guides" / "s3.md").read_text()
DOCUMENTED_ENDPOINT = "http://127.0.0.1:8333"
DOCUMENTED_DIR = "/home/you/data/s3"


def blocks(language: str) -> list[str]:
    """The guide's fenced blocks of ``language``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", GUIDE, flags=re.DOTALL)


def command_lines(block: str) -> list[str]:
    """A bash block's commands, but its ``pip install`` (this checkout is installed already)."""
    return [line for line in block.splitlines() if line and not line.startswith("pip install ")]


def run_command(line: str, folder: Path, env: dict[str, str]) -> str:
    """``loaderfactory ...`` from the guide, run from this checkout; its output, having checked it ran."""
    argv = [sys.executable, "-m", *shlex.split(line)]
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.mark.slow
def test_the_s3_guide_runs_as_written(tmp_path: Path) -> None:
    """The guide's commands and code run in order against the server its first command starts; the
    server prints the settings the guide shows, Ctrl-C stops it leaving no ``weed``, and started again
    on the same folder it serves the same objects on the same port."""
    start, pack, index, read = blocks("bash")
    printed_settings, stopped = blocks("text")
    (python_code,) = blocks("python")
    (serve,) = command_lines(start)
    assert serve == "loaderfactory s3-server --dir data/s3"
    folder = str(tmp_path / "data" / "s3")

    server, seen, weed = start_server([sys.executable, "-m", *shlex.split(serve), "--port", "0"], tmp_path)
    try:
        endpoint = re.findall(r"^export AWS_ENDPOINT_URL=(\S+)$", seen, flags=re.MULTILINE)[0]
        assert seen == printed_settings.replace(DOCUMENTED_ENDPOINT, endpoint).replace(DOCUMENTED_DIR, folder)

        env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
        env["PYTHONPATH"] = str(ROOT)
        exports = [line for line in command_lines(pack) if line.startswith("export ")]
        assert "\n".join(exports) in printed_settings  # the lines to paste are the printed ones
        for line in exports:
            name, value = line.removeprefix("export ").split("=", 1)
            env[name] = value.replace(DOCUMENTED_ENDPOINT, endpoint)
        for block in (pack, index, read):
            for line in command_lines(block):
                if not line.startswith("export "):
                    run_command(line, tmp_path, env)

        # The Python block reaches the server through its storage_options alone: no AWS_* variables.
        code = python_code.replace(DOCUMENTED_ENDPOINT, endpoint)
        plain = {name: value for name, value in env.items() if not name.startswith("AWS_")}
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=plain, capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, done.stderr[-3000:]
        (promised,) = re.findall(r"It prints `([^`]+)`", GUIDE)
        assert done.stdout.strip() == promised

        server.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = finish(server, timeout=60)
        assert server.returncode in (0, 130)
        assert err.decode().strip() == stopped.strip().replace(DOCUMENTED_DIR, folder)
        assert not alive(weed)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
        kill_survivors([weed])

    again, seen, weed = start_server([sys.executable, "-m", *shlex.split(serve), "--port", "0"], tmp_path)
    try:
        assert f"export AWS_ENDPOINT_URL={endpoint}\n" in seen  # the folder's port, free again
        (index_line,) = command_lines(index)
        assert "8 shard(s), 512 sample(s)" in run_command(index_line, tmp_path, env)
    finally:
        again.terminate()
        finish(again, timeout=60)
        kill_survivors([weed])
