"""A Google Cloud Storage emulator on the loopback interface for tests: ``gcp-storage-emulator``.

``pip install gcp-storage-emulator`` (the test extra has it) installs a pure-Python server of GCS's
JSON API. :func:`gcs_emulator` starts it in a child process on a free port, in memory, with one
bucket, waits until it answers and yields where to reach it; on exit it stops it (no process left).
gcsfs reaches it through ``endpoint_url`` with anonymous credentials.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 60.0
"""How long the emulator gets to answer (about a second; more on a loaded machine)."""


@dataclass(frozen=True)
class GcsServer:
    """Where a running emulator is and which bucket it holds."""

    endpoint_url: str
    bucket: str

    @property
    def storage_options(self) -> dict[str, str]:
        """The ``storage_options`` a ``gs://`` URL on this emulator needs."""
        return {"endpoint_url": self.endpoint_url, "token": "anon", "project": "loaderfactory-test"}

    def url(self, key: str) -> str:
        """The ``gs://`` URL of ``key`` in the emulator's bucket."""
        return f"gs://{self.bucket}/{key.lstrip('/')}"


def emulator_installed() -> bool:
    """True when both the emulator and gcsfs can be imported."""
    return all(importlib.util.find_spec(name) is not None for name in ("gcp_storage_emulator", "gcsfs"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_answering(bucket_url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Poll the bucket's metadata until the emulator answers 200, or the deadline."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the GCS emulator exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(bucket_url, timeout=1.0):
                return
        except urllib.error.HTTPError:
            time.sleep(0.2)  # answering, but the bucket is not made yet
        except OSError:
            time.sleep(0.2)  # not listening yet; the next poll is bounded by the deadline
    raise TimeoutError(f"the GCS emulator did not answer at {bucket_url} within {START_TIMEOUT_S} s")


@contextlib.contextmanager
def gcs_emulator(bucket: str = "shards") -> Iterator[GcsServer]:
    """Run ``gcp-storage-emulator`` in memory on a free loopback port with one bucket; stop it on exit."""
    port = _free_port()
    command = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host=127.0.0.1", f"--port={port}"]
    command += ["--in-memory", f"--default-bucket={bucket}"]
    with tempfile.TemporaryDirectory(prefix="gcs-emulator-") as tmp:
        log = Path(tmp) / "emulator.log"
        with log.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp)
        try:
            endpoint = f"http://127.0.0.1:{port}"
            _wait_until_answering(f"{endpoint}/storage/v1/b/{bucket}", process, log)
            yield GcsServer(endpoint, bucket)
        finally:
            process.kill()  # in memory: nothing to flush
            process.wait()
