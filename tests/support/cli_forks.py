"""``python -m loaderfactory`` runs forked from interpreters that imported the command once.

A run of the command in a fresh interpreter spends most of its time importing torch and Hydra
(seconds on a busy machine). :class:`CliForks` starts two servers (``cli_fork_server.py``): one
that imported the command and torch, for runs that build a loader, and one without torch, for the
look-only modes (``validate``, ``schema``, ``--cfg``, ``--help``), which import none. Each run is a
fork of one of them: it takes the run's folder, arguments and environment, points stdin, stdout and
stderr at files, runs ``loaderfactory`` as ``python -m`` does (``runpy``) and exits as the
interpreter does. Only the imports are shared, so checks of what the command imports keep their
own interpreter (``test_look_only_modes_import_no_torch_and_write_nothing``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
"""The import path of the tests' command runs: this checkout first."""
CLI_FORKS: list[CliForks] = []
"""The session's fork server while the ``cli_forks`` fixture holds it (``conftest.py``)."""

LOOK_ONLY = ("run.mode=validate", "run.mode=schema", "--cfg", "--help", "--info")
QUICK = ["run.progress=false", "run.plots=false", "dataset.length=64", "loader.batch_size=8"]
"""Overrides for a short quiet run of the command."""


class CliForks:
    """Two fork servers (with torch, without) and :meth:`run`, one fork per run of the command."""

    def __init__(self, pythonpath: str) -> None:
        self.pythonpath = pythonpath
        self.outputs = Path(tempfile.mkdtemp(prefix="cli-forks-"))  # outside the folders tests list
        env = {**os.environ, "PYTHONPATH": pythonpath}
        server = [sys.executable, str(Path(__file__).with_name("cli_fork_server.py"))]
        self.servers = {
            heavy: subprocess.Popen(
                [*server, *(["torch"] if heavy else [])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                text=True,
            )
            for heavy in (True, False)
        }

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a run with ``env`` imports from where the servers do (else it needs its own)."""
        return env.get("PYTHONPATH") == self.pythonpath and env.get("PYTHONHASHSEED") is None

    def run(self, args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """``python -m loaderfactory ARGS`` from ``cwd`` with ``env``, as ``subprocess.run`` reports it."""
        server = self.servers[not any(arg in LOOK_ONLY for arg in args)]
        assert server.stdin is not None and server.stdout is not None
        out, err = self.outputs / "stdout", self.outputs / "stderr"
        request = {"cwd": str(cwd), "args": args, "env": env, "stdout": str(out), "stderr": str(err)}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        assert answer, "the command's fork server died"
        return subprocess.CompletedProcess(args, json.loads(answer), out.read_text(), err.read_text())

    def close(self) -> None:
        for server in self.servers.values():
            assert server.stdin is not None and server.stdout is not None
            server.stdin.close()
            server.wait(30)
            server.stdout.close()
        shutil.rmtree(self.outputs)


def run_command(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m loaderfactory ARGS`` from ``cwd`` (``env``: variables to add), forked from the
    session's :class:`CliForks` while the ``cli_forks`` fixture holds it, else a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
    if CLI_FORKS and CLI_FORKS[0].serves(env):
        return CLI_FORKS[0].run(list(args), cwd, env)
    command = [sys.executable, "-m", "loaderfactory", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m loaderfactory ARGS`` from ``tmp_path``, with Hydra's output dirs inside it
    (``env``: variables to add); forked from the session's :class:`CliForks` where a test asks for it."""
    args = (*args, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    return run_command(tmp_path, *args, env=env, timeout=100)
