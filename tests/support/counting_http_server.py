"""A loopback HTTP server of a folder that honours Range requests and counts the body bytes it sends."""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SHUTDOWN_POLL_S = 0.05
"""How often a serving loop looks whether it is asked to stop: the test's teardown waits that long."""


class CountingRangeHandler(SimpleHTTPRequestHandler):
    """Static files, ``Range: bytes=a-b`` answered as 206 Partial Content as object stores do; the body
    bytes of each answer are added to ``served[path]`` (``served`` is set per server)."""

    served: Counter[str]
    served_lock: threading.Lock

    def do_GET(self) -> None:
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            super().do_GET()
            return
        data = path.read_bytes()
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        start, end = (0, len(data) - 1) if not wanted else (int(wanted[1]), int(wanted[2] or len(data) - 1))
        end = min(end, len(data) - 1)
        self.send_response(206 if wanted else 200)
        if wanted:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.wfile.write(data[start : end + 1])
        with self.served_lock:
            self.served[self.path] += end - start + 1

    def log_message(self, *args: object) -> None:
        """Quiet: the test output is not the place for an access log."""


@contextlib.contextmanager
def serving(
    folder: Path, handler_class: type[CountingRangeHandler] = CountingRangeHandler, **attributes: object
) -> Iterator[tuple[str, Counter[str]]]:
    """``folder`` served on a free loopback port: (its base URL, body bytes sent per URL path).

    ``handler_class`` answers the requests, with ``attributes`` set on it for this server."""
    served: Counter[str] = Counter()
    shared = {"served": served, "served_lock": threading.Lock(), **attributes}
    handler = type("Handler", (handler_class,), shared)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    # A short poll: shutdown() waits for the loop's next look at its flag (0.5 s by default).
    serve = functools.partial(server.serve_forever, poll_interval=SHUTDOWN_POLL_S)
    thread = threading.Thread(target=serve, name="http-shards")
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
