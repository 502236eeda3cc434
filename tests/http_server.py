"""A local HTTP object server for the shards tests, in its own process: static files, Range requests,
and a way to go away in the middle of an epoch.

Object stores answer ``Range: bytes=a-b`` with 206 Partial Content; this server does too, on a free
loopback port. It runs in a child process, as a real server does: a server thread inside the test
process would hand its listening socket to every forked DataLoader worker, which then keeps it open
(connections accepted by the kernel, never answered) after the test stops it.

:meth:`ShardServer.go_away` fails every later request the way a server does mid-epoch: ``"stops"``
ends the process (connections refused), ``"cuts"`` keeps it listening but answers each request with
its headers and half its body, then drops the connection, ``"hangs"`` accepts each request and
never answers (a server stuck, or a network that drops packets). Objects named ``broken`` are cut so from
the start (a server that fails on one object, for a run the test cannot step through).

Run as ``python http_server.py FOLDER [BROKEN...]``: serves FOLDER and prints its port first.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Sequence
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GO_AWAY_MODES = ("stops", "cuts", "hangs")
_SWITCH = "/__from_now_on__/"
"""The test's switch: ``GET /__from_now_on__/cuts`` (or ``hangs``), answered once the switch is made."""


class RangeHandler(SimpleHTTPRequestHandler):
    """Static files with ``Range: bytes=a-b`` answered as 206 Partial Content, as object stores do."""

    server: _Server

    def do_GET(self) -> None:
        if self.path.startswith(_SWITCH):
            self.server.failing = self.path.removeprefix(_SWITCH)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        path = Path(self.translate_path(self.path))
        if self.server.failing == "hangs":
            threading.Event().wait()  # until the process ends
        cut = self.server.failing == "cuts" or path.name in self.server.broken
        if not path.is_file() or not (wanted or cut):
            super().do_GET()
            return
        data = path.read_bytes()
        start, end = (int(wanted[1]), int(wanted[2] or len(data) - 1)) if wanted else (0, len(data) - 1)
        body = data[start : min(end, len(data) - 1) + 1]
        self.send_response(206 if wanted else 200)
        if wanted:
            self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # Cutting: the server dies mid-transfer, so the promised length never arrives.
        self.wfile.write(body[: len(body) // 2] if cut else body)
        self.close_connection = True

    def do_HEAD(self) -> None:
        if self.server.failing == "hangs":
            threading.Event().wait()  # until the process ends
        super().do_HEAD()

    def log_message(self, *args: object) -> None:
        """Quiet: the test output is not the place for an access log."""


class _Server(ThreadingHTTPServer):
    failing = ""
    broken: frozenset[str] = frozenset()


class ShardServer:
    """``folder`` served over HTTP at :attr:`url` by a child process; :meth:`close` ends it (twice: fine)."""

    def __init__(self, folder: Path, broken: Sequence[str] = ()) -> None:
        self._process = subprocess.Popen(
            [sys.executable, __file__, str(folder), *broken], stdout=subprocess.PIPE, text=True
        )
        assert self._process.stdout is not None
        port = self._process.stdout.readline().strip()
        if not port.isdigit():
            self.close()
            raise RuntimeError(f"the test HTTP server did not start (it printed {port!r})")
        self.url = f"http://127.0.0.1:{port}"

    def go_away(self, mode: str) -> None:
        """Fail every request from now on: ``"stops"`` (connections refused), ``"cuts"`` (half a body)
        or ``"hangs"`` (no answer)."""
        if mode not in GO_AWAY_MODES:
            raise ValueError(f"mode must be one of {GO_AWAY_MODES}, got {mode!r}")
        if mode == "stops":
            self.close()
            return
        with urllib.request.urlopen(f"{self.url}{_SWITCH}{mode}", timeout=30) as answer:
            answer.read()

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
        self._process.wait(timeout=30)
        if self._process.stdout is not None:
            self._process.stdout.close()


def main(folder: str, broken: Sequence[str]) -> None:
    server = _Server(("127.0.0.1", 0), functools.partial(RangeHandler, directory=folder))
    server.broken = frozenset(broken)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
