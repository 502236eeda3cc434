"""Shards over ``http://``: a local HTTP server that honours Range requests, read through ShardsDataset."""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from shards_data import write_tar_shards

from loaderfactory.shards import ShardsDataset, Storage, build_index


class RangeHandler(SimpleHTTPRequestHandler):
    """Static files with ``Range: bytes=a-b`` answered as 206 Partial Content, as object stores do."""

    def do_GET(self) -> None:
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        path = Path(self.translate_path(self.path))
        if not wanted or not path.is_file():
            super().do_GET()
            return
        data = path.read_bytes()
        start, end = int(wanted[1]), min(int(wanted[2] or len(data) - 1), len(data) - 1)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.wfile.write(data[start : end + 1])

    def log_message(self, *args: object) -> None:
        """Quiet: the test output is not the place for an access log."""


@pytest.fixture
def http_folder(tmp_path: Path, fsspec_io_thread: None) -> Iterator[tuple[Path, str]]:
    """``tmp_path`` served on a free loopback port; the server thread is stopped after the test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(RangeHandler, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, name="http-shards")
    thread.start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_http_shards_give_every_id_once(http_folder: tuple[Path, str]) -> None:
    """Tar shards served over HTTP are indexed by range reads and give each sample id once."""
    folder, base = http_folder
    names = [Path(p).name for p in write_tar_shards(folder, [4, 2, 3])]
    urls = [f"{base}/{name}" for name in names]
    shards = build_index(urls, Storage(), progress=False)
    dataset = ShardsDataset(urls, index=shards)
    assert [dataset[i]["cls"] for i in range(len(dataset))] == list(range(9))
    with pytest.raises(FileNotFoundError, match=rf"{base}/absent\.tar"):
        Storage().read(f"{base}/absent.tar")
