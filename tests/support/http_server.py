"""A local HTTP object server for the shards tests, in its own process: static files, Range requests,
and a way to go away in the middle of an epoch.

Object stores answer ``Range: bytes=a-b`` with 206 Partial Content; this server does too, on a free
loopback port. It runs in a child process, as a real server does: a server thread inside the test
process would hand its listening socket to every forked DataLoader worker, which then keeps it open
(connections accepted by the kernel, never answered) after the test stops it.

:meth:`ShardServer.go_away` fails every later request the way a server does mid-epoch: ``"stops"``
ends the process (connections refused), ``"cuts"`` keeps it listening but answers each request with
its headers and half its body, then drops the connection, ``"hangs"`` accepts each request and
never answers (a server stuck, or a network that drops packets), ``"stalls"`` sends the headers and
half the body and then nothing more, ``"fails-N"`` answers each object's next N requests with
HTTP 500 (``"fails-always"``: every one), and ``"ignores-range"`` answers as ``python -m
http.server`` does, with the whole object to a ranged GET. Objects in ``sparing`` are served as
before. Objects named ``broken`` are cut so from the start (a server that fails on one object, for a
run the test cannot step through). :meth:`ShardServer.held` says how many requests hang or stall now.

Run as ``python http_server.py FOLDER [BROKEN...]``: serves FOLDER and prints its port first.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from collections.abc import Sequence
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GO_AWAY_MODES = ("stops", "cuts", "hangs", "stalls", "fails-always", "ignores-range")
_SWITCH = "/__from_now_on__/"
"""The test's switch: ``GET /__from_now_on__/cuts`` (or another mode; ``/cuts/a.tar,b.tar`` spares
``a.tar`` and ``b.tar``), answered once the switch is made."""
_HELD = "/__held__"
"""``GET /__held__`` answers how many requests hang or stall now."""
_FAILED = "/__failed__"
"""``GET /__failed__`` answers how many requests got HTTP 500 so far."""


class RangeHandler(SimpleHTTPRequestHandler):
    """Static files with ``Range: bytes=a-b`` answered as 206 Partial Content, as object stores do."""

    server: _Server

    def do_GET(self) -> None:
        if self._test_switch():
            return
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        path = Path(self.translate_path(self.path))
        failing = self._failing(path)
        if self._fails(failing, path):  # a hang holds the request; a failure answered 500
            return
        if failing == "ignores-range":
            super().do_GET()  # the standard library's file server: no Range support
            return
        cut = failing in ("cuts", "stalls") or path.name in self.server.broken
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
        if failing == "stalls":
            self.wfile.flush()
            self._hold()
        self.close_connection = True

    def do_HEAD(self) -> None:
        path = Path(self.translate_path(self.path))
        if not self._fails(self._failing(path), path):  # a stall is in a body: HEAD answers
            super().do_HEAD()

    def _test_switch(self) -> bool:
        """Answer the test's own requests (the switch, the count of held requests)."""
        if self.path.startswith(_SWITCH):
            mode, _, spared = self.path.removeprefix(_SWITCH).partition("/")
            self.server.failing, self.server.spared = mode, frozenset(filter(None, spared.split(",")))
            body = b""
        elif self.path == _HELD:
            body = str(self.server.held).encode()
        elif self.path == _FAILED:
            body = str(self.server.failed).encode()
        else:
            return False
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return True

    def _failing(self, path: Path) -> str:
        return "" if path.name in self.server.spared else self.server.failing

    def _fails(self, failing: str, path: Path) -> bool:
        """Answer HTTP 500 when ``failing`` says this object's request fails; whether it did. A hang
        holds the request until the process ends."""
        if failing == "hangs":
            self._hold()
            return True
        if not failing.startswith("fails-"):
            return False
        with self.server.lock:
            self.server.failures[path.name] += 1
            failed = failing == "fails-always" or self.server.failures[path.name] <= int(failing[6:])
            self.server.failed += failed
        if failed:
            self.send_error(500, "injected failure")
        return failed

    def _hold(self) -> None:
        with self.server.lock:
            self.server.held += 1
        threading.Event().wait()  # until the process ends

    def log_message(self, *args: object) -> None:
        """Quiet: the test output is not the place for an access log."""


class _Server(ThreadingHTTPServer):
    failing = ""
    broken: frozenset[str] = frozenset()
    spared: frozenset[str] = frozenset()
    held = 0
    failed = 0

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lock = threading.Lock()
        self.failures: Counter[str] = Counter()


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

    def go_away(self, mode: str, sparing: Sequence[str] = ()) -> None:
        """Fail every request from now on, except for the objects named in ``sparing``: ``"stops"``
        (connections refused), ``"cuts"`` (half a body), ``"hangs"`` (no answer), ``"stalls"`` (half
        a body, then nothing), ``"fails-N"`` (each object's next N requests get HTTP 500),
        ``"fails-always"`` or ``"ignores-range"`` (whole objects, as ``python -m http.server``)."""
        if mode not in GO_AWAY_MODES and not re.fullmatch(r"fails-\d+", mode):
            raise ValueError(f"mode must be one of {GO_AWAY_MODES} or fails-N, got {mode!r}")
        if mode == "stops":
            self.close()
            return
        with urllib.request.urlopen(f"{self.url}{_SWITCH}{mode}/{','.join(sparing)}", timeout=30) as answer:
            answer.read()

    def held(self) -> int:
        """How many requests the server holds now without finishing their answer."""
        with urllib.request.urlopen(f"{self.url}{_HELD}", timeout=30) as answer:
            return int(answer.read())

    def failed(self) -> int:
        """How many requests the server answered with HTTP 500 so far."""
        with urllib.request.urlopen(f"{self.url}{_FAILED}", timeout=30) as answer:
            return int(answer.read())

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
