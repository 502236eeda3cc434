"""The fork server of ``cli_forks.py``: ``python tests/support/cli_fork_server.py [torch]``.

Imports the command (and torch, with ``torch``), then reads one JSON request a line from stdin
(``cwd``, ``args``, ``env``, ``stdout``, ``stderr``), forks a child per request and answers its exit
status on stdout. The child runs ``python -m loaderfactory ARGS`` as that command would.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import runpy
import sys
import threading
import traceback
from typing import Any

if sys.argv[1:] == ["torch"]:
    import torch  # noqa: F401 - what a command that builds a loader imports first

import loaderfactory.config.schema
import loaderfactory.hydra.app
import loaderfactory.hydra.cli
import loaderfactory.intake  # what validating a config loads (no torch)

if sys.argv[1:] == ["torch"]:
    import loaderfactory.factory  # noqa: F401


def next_request() -> dict[str, Any]:
    """Forks one child per request line and answers its exit status; the child returns the request."""
    gc.freeze()  # the children's collections then leave the imported objects' pages shared
    for line in sys.stdin:
        request: dict[str, Any] = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            return request
        _, status = os.waitpid(pid, 0)
        print(json.dumps(os.waitstatus_to_exitcode(status)), flush=True)
    raise SystemExit(0)


def exit_code(stop: SystemExit) -> int:
    """The status ``python`` exits with on ``stop``: its number, or 1 after printing its message."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1


def run_command(request: dict[str, Any]) -> int:
    """``python -m loaderfactory ARGS`` from ``cwd`` with ``env``: its exit status."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for source, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
        os.close(source)
    sys.path[0] = request["cwd"]  # `python -m` puts the current folder first
    sys.argv = ["-m", *request["args"]]
    try:
        runpy.run_module("loaderfactory", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        return exit_code(stop)
    except BaseException:  # noqa: BLE001 - the interpreter reports any error left uncaught
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    code = run_command(next_request())
    # The interpreter's own exit, short of tearing its modules down (which would write to, and so
    # copy, every page the fork shares): other threads joined, atexit handlers (logging's flush).
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
