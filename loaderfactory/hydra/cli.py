"""The ``loaderfactory`` command: a Hydra app that builds a loader from config, runs it, reports.

loaderfactory prefetch.buffer_size=4 run.batches=200
loaderfactory -m prefetch.buffer_size=1,4,16          # one report per job, a summary, non-zero if any failed
loaderfactory run.mode=validate loader.batch_size=0    # prints every problem, exits 2
loaderfactory run.mode=schema > loaderfactory.schema.json
loaderfactory run.mode=index dataset=shards dataset.urls='s3://bucket/train/'  # writes the shards' index
loaderfactory run.mode=pack pack.out=data/shards pack.shard_size=64MiB   # the dataset as shards

``validate``, ``schema`` and ``--help`` import no torch and write no output folder.

This module is the entry point and imports the app (:mod:`loaderfactory.hydra.app`: Hydra,
pydantic, later torch; seconds on a busy machine) only once it has taken Ctrl-C in hand, so that
Ctrl-C ends the command the same way at any moment: one line, exit 130, and a report where the
run had an output folder (:mod:`loaderfactory.hydra.exits`, :mod:`loaderfactory.hydra.interrupts`).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from loaderfactory.hydra.exits import (
    INTERRUPTED_EXIT,
    GuardedStdout,
    Interrupted,
    OutputClosed,
    drop_stdout,
    interrupted_line,
    quiet_exit,
    stdout_closed,
)
from loaderfactory.hydra.interrupts import interrupt_once, raise_held

S3_SERVER = "s3-server"
"""``loaderfactory s3-server ...``: :mod:`loaderfactory.testing.s3_command`."""
_APP_NAMES = frozenset({"run_app", "kinds_help", "summary_lines", "worker_error_message", "Job"})
"""The app's names that code importing them from here (as before the entry point was split off) finds."""


def main() -> None:
    """Console entry point (``loaderfactory``)."""
    if sys.argv[1:2] == [S3_SERVER]:  # a sub-command of its own, before Hydra reads the command line
        from loaderfactory.testing.s3_command import main as s3_server

        raise SystemExit(s3_server(sys.argv[2:]))
    interrupt_once()
    sys.stdout = GuardedStdout(sys.stdout)
    try:
        from loaderfactory.hydra.app import run_command

        run_command()
        raise_held()  # a Ctrl-C that came as the command's last close ran
    except Interrupted as stop:
        quiet_exit()
        print(
            f"loaderfactory: interrupted after {stop.batches} batches; partial report in {stop.report}",
            file=sys.stderr,
        )
        raise SystemExit(INTERRUPTED_EXIT) from None
    except KeyboardInterrupt:  # outside a run's job: while starting, or in a mode without a report
        quiet_exit()
        print(interrupted_line(), file=sys.stderr)
        raise SystemExit(INTERRUPTED_EXIT) from None
    except OutputClosed:
        drop_stdout()
        raise
    except BrokenPipeError:  # Hydra's own printing: --help, --cfg
        if not stdout_closed():
            raise
        drop_stdout()
        raise OutputClosed() from None


def __getattr__(name: str) -> Any:
    if name in _APP_NAMES:
        return getattr(importlib.import_module("loaderfactory.hydra.app"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
