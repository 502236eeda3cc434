"""Read and write objects by URL: local paths and ``file://`` directly, remote schemes through fsspec.

Remote schemes need fsspec and a package of their own, which their extra installs
(:mod:`loaderfactory.remote_extras`: ``pip install "loaderfactory[s3]"`` for s3fs, ``[gcs]`` for
gcsfs, ``[http]`` for aiohttp; ``[remote]`` for all). S3 settings
come from ``storage_options`` (``endpoint_url``, ``key``, ``secret``, ``token``, ``region``, or any
``s3fs.S3FileSystem`` argument) or else from the standard AWS environment variables,
``AWS_ENDPOINT_URL`` included. fsspec rather than obstore: obstore's runtime hangs in a forked
worker process (torch's default on Linux), see benchmarks/bench_storage.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import gc
import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from loaderfactory.remote_extras import SCHEME_PACKAGES, install_command
from loaderfactory.shards import cancel as cancelling
from loaderfactory.shards import fork_loops, http_range, signed_get  # noqa: F401  # fork_loops: at-fork hooks
from loaderfactory.shards.errors import ShardNotFoundError, StorageError, changed_during_fetch
from loaderfactory.shards.object_version import version_of
from loaderfactory.shards.stats import NoStats

T = TypeVar("T")
log = logging.getLogger(__name__)
REMOTE_SCHEMES = ("s3", "gs", "http", "https")
_PROTOCOLS = {"s3": "s3", "gs": "gcs", "http": "http", "https": "https"}
_INHERITED: list[dict[str, Any]] = []
"""A forked child's copies of its parent's filesystems, kept referenced: collecting one would run its
finalizer, which closes the parent's connections on the child's event loop and logs a RuntimeError."""
RANGE_BYTES = 8 << 20
""":meth:`Storage.download` reads through fsspec in ranges of this size, each retried on its own."""
HTTP_TIMEOUTS_S = {"sock_connect": 5.0, "sock_read": 60.0}
"""Bounds on each ``http(s)://`` request, as S3's have: a server that accepts a request and never
answers fails it (and it is retried) after ``sock_read`` seconds, not aiohttp's default 5 minutes."""


def split_scheme(url: str) -> tuple[str, str]:
    """``("s3", "bucket/key")`` for a remote URL; ``("file", "/abs/or/rel/path")`` for a local one."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "file", url
    if scheme == "file":
        return "file", rest
    if scheme not in REMOTE_SCHEMES:
        raise ValueError(
            f"{url}: unsupported scheme {scheme!r}; use a local path, file://, "
            f"{', '.join(s + '://' for s in REMOTE_SCHEMES)}"
        )
    return scheme, rest


def is_remote(url: str) -> bool:
    """True for ``s3://``, ``gs://`` and ``http(s)://`` URLs."""
    return split_scheme(url)[0] != "file"


def short_answer(url: str, received: int, size: int) -> StorageError:
    """The error of a fetch that got ``received`` bytes of the ``size`` the object has."""
    return StorageError(
        f"{url}: the server sent {received} bytes of the {size} the object has, and nothing was "
        "cached: an answer cut short (or too long) by the server or the network, not a fault of the "
        "shard; check the server or proxy and run again"
    )


def missing(url: str) -> ShardNotFoundError:
    """The error for an object that does not exist, naming its URL."""
    return ShardNotFoundError(errno.ENOENT, "no such shard or object (check the URL and the bucket)", url)


class Storage:
    """Lists, sizes, reads (whole or a byte range) and writes objects by URL, retrying transient errors.

    Args:
        storage_options: settings for remote stores (see the module docstring); local paths ignore them.
        retries: how many times a failing remote call is retried, with exponential backoff starting
            at ``backoff_s``; :attr:`retried` counts the retries made. A missing object is never retried.
        backoff_s: the first wait between retries; it doubles each time.
        stats: counts bytes read, retries and time in remote requests across processes (a
            :class:`~loaderfactory.shards.stats.ShardStats`); the default counts nothing.

    Picklable and fork-safe: a copy in a worker process opens its own connections on first use.
    """

    def __init__(
        self,
        storage_options: Mapping[str, Any] | None = None,
        retries: int = 3,
        backoff_s: float = 0.1,
        stats: NoStats | None = None,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be ≥ 0, got {retries}")
        self.storage_options = dict(storage_options or {})
        self.retries = retries
        self.backoff_s = backoff_s
        self.retried = 0
        self.stats = stats or NoStats()
        self._signed_gets = signed_get.plain_s3_settings(_s3_options(self.storage_options))
        """Whether S3 fetches go by signed GETs: the settings allow it, and no store refused one."""
        self._filesystems: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._ignoring_hosts: set[str] = set()
        """Hosts found answering ranged GETs with whole objects (said once, in the log)."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_filesystems"], state["_lock"] = {}, None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def list(self, url: str) -> list[str]:
        """The URLs of every object under the folder or prefix ``url``, sorted."""
        scheme, rest = split_scheme(url)
        if scheme == "file":
            folder = Path(rest)
            if not folder.is_dir():
                raise missing(url)
            files = sorted(p for p in folder.rglob("*") if p.is_file())
            return [f"file://{p}" if url.startswith("file://") else str(p) for p in files]
        fs, path = self._remote(scheme, rest)
        found = self._retry(url, lambda: self._call(fs, fs._find(path.rstrip("/"))))
        return sorted(_url_of(scheme, p) for p in found)

    def size(self, url: str) -> int:
        """The size of the object at ``url`` in bytes."""
        scheme, rest = split_scheme(url)
        if scheme == "file":
            try:
                return os.stat(rest).st_size
            except FileNotFoundError as err:
                raise missing(url) from err
        fs, path = self._remote(scheme, rest)
        return int(self._retry(url, lambda: self._call(fs, fs._size(path))))

    def version(self, url: str) -> tuple[int, str]:
        """The size of the object at ``url`` and the store's tag of this version of it: its ETag, else
        its modification time (:func:`~loaderfactory.shards.object_version.version_of`); ``""`` for a
        local file and a store that tells neither. Asked of the store now: the listing fsspec keeps
        (s3fs's answers ``info`` from it) is dropped for ``url`` first."""
        scheme, rest = split_scheme(url)
        if scheme == "file":
            return self.size(url), ""
        fs, path = self._remote(scheme, rest)

        def ask() -> dict[str, Any]:
            fs.invalidate_cache(path)
            return dict(self._call(fs, fs._info(path)))

        info = self._retry(url, ask)
        if info.get("size") is None:
            raise StorageError(f"{url}: the server tells no size for it (no Content-Length on HEAD)")
        return int(info["size"]), version_of(info)

    def read(self, url: str) -> bytes:
        """The whole object at ``url``."""
        scheme, rest = split_scheme(url)
        if scheme == "file":
            try:
                data = Path(rest).read_bytes()
            except FileNotFoundError as err:
                raise missing(url) from err
            self.stats.add("bytes_local", len(data))
            return data
        fs, path = self._remote(scheme, rest)
        data = bytes(self._retry(url, lambda: self._call(fs, fs._cat_file(path))))
        self.stats.add("bytes_remote", len(data))
        return data

    def read_range(self, url: str, start: int, end: int, size: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object at ``url`` (fewer where the object ends before ``end``).
        ``size``: the object's size expected; an ``http(s)://`` answer telling another is StorageError
        (:func:`.http_range.read_range`)."""
        if end <= start:
            return b""
        scheme, rest = split_scheme(url)
        if scheme == "file":
            try:
                with open(rest, "rb") as file:
                    file.seek(start)
                    data = file.read(end - start)
            except FileNotFoundError as err:
                raise missing(url) from err
            self.stats.add("bytes_local", len(data))
            return data
        data = self._remote_range(url, start, end, size=size)[: end - start]
        self.stats.add("bytes_remote", len(data))
        return data

    def _remote_range(
        self, url: str, start: int, end: int, rest_too: bool = False, size: int | None = None
    ) -> bytes:
        """Bytes ``[start, end)`` of a remote object, retried; with ``rest_too``, from a server that
        ignores ``Range`` (``http(s)://``) the rest of its object after ``start`` as well."""
        scheme, rest = split_scheme(url)
        fs, path = self._remote(scheme, rest)
        if scheme in ("http", "https"):
            read = http_range.read_range(fs, path, start, end, rest_too, self._range_ignored, size)
            return bytes(self._retry(url, lambda: self._call(fs, read())))
        return bytes(self._retry(url, lambda: self._call(fs, fs._cat_file(path, start=start, end=end))))

    def _range_ignored(self, url: str) -> None:
        """Say once per process that a server answers ranged GETs with whole objects."""
        host = _host(url)
        if host not in self._ignoring_hosts:
            self._ignoring_hosts.add(host)
            log.warning(
                "%s: the server ignores Range requests and sends whole objects; reads take the bytes "
                "asked for from them, which costs more transfer than a server honouring Range",
                url,
            )

    def download(self, url: str, out: BinaryIO, size: int, cancel: threading.Event | None = None) -> None:
        """Write the whole object at ``url`` (``size`` bytes) to ``out``.

        An S3 object whose settings leave requests plain comes by one signed GET read without
        holding the GIL (:mod:`~loaderfactory.shards.signed_get`), a failed attempt retried from the
        byte reached; anything else by ``RANGE_BYTES`` ranges, each retried on its own, and so does
        the rest of the object and every later one once the store refuses a signed GET. A server that
        ignores ``Range`` sends the rest of the object at once, which is taken whole.

        ``cancel`` (else the event of :func:`~loaderfactory.shards.cancel.cancelled_by`) set stops it
        with InterruptedError: a :class:`~loaderfactory.shards.cancel.Cancel` at once, whatever the
        request waits for (an answer, the next bytes, a retry's backoff); a plain Event between pieces.
        """
        if size <= 0:
            return
        cancel = cancelling.current(cancel)
        with cancelling.cancelled_by(cancel) if cancel is not None else contextlib.nullcontext():
            self._download(url, out, size, cancel)

    def _download(self, url: str, out: BinaryIO, size: int, cancel: threading.Event | None) -> None:
        scheme, rest = split_scheme(url)
        begin = out.tell()
        if scheme == "s3" and self._signed_gets:
            fs, path = self._remote(scheme, rest)
            timeout_s = float(fs.config_kwargs.get("read_timeout", 60))

            def attempt() -> None:
                signed = fs.sign(path, expiration=signed_get.SIGNED_FOR_S)
                try:
                    signed_get.get_into(signed, out.tell() - begin, size, out, cancel, timeout_s, size)
                except signed_get.SizeChanged as changed:
                    raise changed_during_fetch(url, changed.told, size) from changed

            try:
                self._retry(url, attempt)
                self.stats.add("bytes_remote", size)
                return
            except signed_get.SignedUrlRefused as refused:  # s3fs's own requests may still be let in
                self._signed_gets = False
                log.info("%s: a signed GET was refused (%s); reading through s3fs from now on", url, refused)
        position = out.tell() - begin
        while position < size:
            if cancel is not None and cancel.is_set():
                raise InterruptedError(f"{url}: fetch into the cache cancelled")
            end = min(size, position + RANGE_BYTES)
            if _host(url) in self._ignoring_hosts:  # it sends whole objects: take the rest from one
                data = self._remote_range(url, position, end, rest_too=True, size=size)
                self.stats.add("bytes_remote", len(data))
            else:
                data = self.read_range(url, position, end, size)
            if not data:
                raise short_answer(url, position, size)
            if position + len(data) > size:
                raise StorageError(
                    f"{url}: longer than the {size} bytes it had when listed or indexed; did it change? "
                    "Index the shards again"
                )
            out.write(data)
            position += len(data)

    def write(self, url: str, data: bytes) -> None:
        """Write ``data`` as the object at ``url`` (a local file appears whole: written aside, renamed)."""
        scheme, rest = split_scheme(url)
        if scheme == "file":
            path = Path(rest)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
            try:
                partial.write_bytes(data)
                partial.replace(path)
            except BaseException:  # a full disk or Ctrl-C: leave no half-written file behind
                partial.unlink(missing_ok=True)
                raise
            return
        fs, path_in_store = self._remote(scheme, rest)
        self._retry(url, lambda: self._call(fs, fs._pipe_file(path_in_store, data)))

    def _retry(self, url: str, call: Callable[[], T]) -> T:
        """Run ``call``; retry transient failures with backoff; name ``url`` in every error."""
        with self.stats.timed("remote_ns"):
            return self._attempts(url, call)

    def _attempts(self, url: str, call: Callable[[], T]) -> T:
        wait = self.backoff_s
        cancel = cancelling.current()
        for attempt in range(self.retries + 1):
            try:
                return call()
            except InterruptedError:
                raise InterruptedError(f"{url}: fetch cancelled") from None
            except Exception as err:  # botocore's and aiohttp's errors share no base class with OSError
                failure = _transient(url, err)
                if attempt == self.retries:
                    raise StorageError(_gave_up(url, self.retries, failure)) from err
            self.retried += 1
            self.stats.add("retries")
            # backoff between attempts against a struggling server, cut short by a cancel
            if cancel is not None and cancel.wait(wait):
                raise InterruptedError(f"{url}: fetch cancelled")
            if cancel is None:
                time.sleep(wait)
            wait *= 2
        raise AssertionError("unreachable")

    def _call(self, fs: Any, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run an fsspec coroutine on ``fs``'s event loop; a :class:`~.cancel.Cancel` this thread
        obeys (:func:`~.cancel.cancelled_by`) stops it at once, with InterruptedError."""
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coroutine, fs.loop)
        with cancelling.stopping(cancelling.current(), future.cancel):
            try:
                return future.result()
            except concurrent.futures.CancelledError:
                raise InterruptedError("request cancelled") from None

    def _remote(self, scheme: str, rest: str) -> tuple[Any, str]:
        """This process's fsspec filesystem for ``scheme`` and the path it takes for ``rest``."""
        with self._lock:
            if os.getpid() != self._pid:  # a forked worker must not reuse its parent's event loop
                _INHERITED.append(self._filesystems)
                self._filesystems, self._pid = {}, os.getpid()
                # The parent's dropped filesystems, collected later on the child's event-loop thread,
                # would log "attached to a different loop" errors; collected here they close quietly.
                gc.collect()
            fs = self._filesystems.get(scheme)
            if fs is None:
                fs = self._filesystems[scheme] = self._open(scheme)
        return fs, f"{scheme}://{rest}" if scheme in ("http", "https") else rest

    def _open(self, scheme: str) -> Any:
        try:
            import fsspec  # type: ignore[import-untyped]  # fsspec ships no type stubs

            fsspec.get_filesystem_class(_PROTOCOLS[scheme])
        except ImportError as err:
            raise ImportError(
                f"{scheme}:// URLs need fsspec and {SCHEME_PACKAGES[scheme]}: {install_command(scheme)}"
            ) from err
        options = dict(self.storage_options)
        if scheme == "s3":
            options = _s3_options(options)
        if scheme == "gs":
            return _gcs_filesystem(options)
        if scheme in ("http", "https"):
            options = _http_options(options)
        # skip_instance_cache: fsspec would hand every Storage the same object, retries setting included.
        fs = fsspec.filesystem(_PROTOCOLS[scheme], skip_instance_cache=True, **options)
        if scheme == "s3":
            fs.retries = 1  # s3fs's own retry loop off: ours retries and counts
        return fs


def _gcs_filesystem(options: dict[str, Any]) -> Any:
    """gcsfs's JSON-API filesystem (``gcsfs.core``), whatever class ``gcs`` maps to.

    Since 2026 gcsfs maps ``gcs`` by default to a class that first asks a gRPC control plane for each
    bucket's layout (its experimental zonal and HNS bucket support): with an ``endpoint_url`` (an
    emulator, a proxy) that costs a 60 s timeout on every call, and gRPC's threads do not survive
    the fork of a DataLoader worker. The JSON API reads every bucket that one does.
    """
    core = importlib.import_module("gcsfs.core")
    return core.GCSFileSystem(skip_instance_cache=True, **options)


def _http_options(options: dict[str, Any]) -> dict[str, Any]:
    """fsspec's HTTP arguments with :data:`HTTP_TIMEOUTS_S` unless ``client_kwargs`` has a timeout."""
    import aiohttp

    client = dict(options.get("client_kwargs") or {})
    client.setdefault("timeout", aiohttp.ClientTimeout(total=None, **HTTP_TIMEOUTS_S))
    return {**options, "client_kwargs": client}


def _s3_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    """s3fs arguments from ``settings`` (left as they are): ``region`` into the client, botocore's
    own retries off, bounded timeouts."""
    options = {**settings, "config_kwargs": {**(settings.get("config_kwargs") or {})}}
    region = options.pop("region", None)
    if region is not None:
        options["client_kwargs"] = {**(options.get("client_kwargs") or {}), "region_name": region}
    config = options["config_kwargs"]
    config.setdefault("retries", {"max_attempts": 1})
    config.setdefault("connect_timeout", 5)
    config.setdefault("read_timeout", 60)
    return options


def _transient(url: str, err: Exception) -> BaseException:
    """The failure behind ``err`` that a retry may fix; raises at once for the others (a missing
    object, a refused permission, a bad argument), naming ``url``."""
    if isinstance(err, (InterruptedError, signed_get.SignedUrlRefused, StorageError)):  # final as it is
        raise err
    status = _http_status(err)
    if status is not None:
        if status in (404, 410):
            raise missing(url) from err
        if status < 500 and status not in (408, 425, 429):
            raise StorageError(
                f"{url}: HTTP {status} {_reason(err)}; the server refuses this request: check the URL, "
                "and the credentials or headers in storage_options"
            ) from err
        return err
    if isinstance(err, FileNotFoundError):
        lost = _lost_connection(err)
        if lost is None:
            raise missing(url) from err
        return lost
    if isinstance(err, (PermissionError, ValueError, TypeError)):
        raise StorageError(f"{url}: {type(err).__name__}: {_first_line(err)}") from err
    return err


def _http_status(err: BaseException) -> int | None:
    """The HTTP status of an answer behind ``err`` (aiohttp's or urllib's error, or the one fsspec's
    HTTP ``info`` hides under a FileNotFoundError), None where no answer came."""
    for candidate in (err, err.__cause__):
        status = getattr(candidate, "status", None)  # not ``code``: aiohttp's payload errors have 400
        if isinstance(status, int) and 400 <= status < 600:
            return status
    return None


def _reason(err: BaseException) -> str:
    for candidate in (err, err.__cause__):
        reason = getattr(candidate, "message", None) or getattr(candidate, "reason", None)
        if isinstance(reason, str) and reason:
            return reason
    return ""


def _gave_up(url: str, retries: int, failure: BaseException) -> str:
    """What a StorageError says once ``retries`` are spent on ``failure``."""
    status = _http_status(failure)
    if status is not None:
        return (
            f"{url}: failed after {retries} retries (HTTP {status} {_reason(failure)}); the server "
            "keeps failing on this object: check the server (its logs, its load), or raise "
            "dataset.retries if it fails only now and then"
        )
    described = _described(failure)
    return (
        f"{url}: failed after {retries} retries ({described}); "
        "is the server reachable and the endpoint right?"
    )


def _lost_connection(err: FileNotFoundError) -> BaseException | None:
    """The connection failure behind a FileNotFoundError, None for an object really missing.

    fsspec's HTTP ``info`` (our ``size``) reports any failure as FileNotFoundError: a server that went
    away mid-epoch would look like a missing shard, and not be retried.
    """
    cause = err.__cause__
    if cause is None:
        return None
    aiohttp_error = type(cause).__module__.split(".")[0] == "aiohttp"
    return cause if aiohttp_error or isinstance(cause, (ConnectionError, TimeoutError)) else None


def _host(url: str) -> str:
    """``scheme://host:port`` of a URL."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _url_of(scheme: str, path: str) -> str:
    return path if "://" in path else f"{scheme}://{path}"


def _described(err: BaseException) -> str:
    """``"Type: first line"``, or the type alone for an error without a message (a timeout)."""
    line = _first_line(err)
    return f"{type(err).__name__}: {line}" if line else type(err).__name__


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else ""
