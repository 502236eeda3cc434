"""Read and write objects by URL: local paths and ``file://`` directly, remote schemes through fsspec.

Remote schemes need fsspec and a package of their own, which their extra installs
(:mod:`loaderfactory.remote_extras`: ``pip install "loaderfactory[s3]"`` for s3fs, ``[gcs]`` for
gcsfs, ``[http]`` for aiohttp; ``[remote]`` for all). S3 settings come from ``storage_options``
(``endpoint_url``, ``key``, ``secret``, ``token``, ``region``, or any ``s3fs.S3FileSystem``
argument) or else from the standard AWS environment variables, ``AWS_ENDPOINT_URL`` included. fsspec
rather than obstore: obstore's runtime hangs in a forked worker process (torch's default on Linux),
see benchmarks/bench_storage.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from loaderfactory.shards.errors import StorageError, changed_during_fetch
from loaderfactory.shards.stats import NoStats
from loaderfactory.shards.storage import cancel as cancelling
from loaderfactory.shards.storage import http_range, signed_get
from loaderfactory.shards.storage.fork_safe import ForkSafeLock
from loaderfactory.shards.storage.object_version import version_of
from loaderfactory.shards.storage.remote_errors import gave_up, missing, short_answer, transient
from loaderfactory.shards.storage.remote_fs import open_filesystem, s3_options

T = TypeVar("T")
log = logging.getLogger(__name__)
REMOTE_SCHEMES = ("s3", "gs", "http", "https")
_INHERITED: list[dict[str, Any]] = []
"""A forked child's copies of its parent's filesystems, kept referenced: collecting one would run its
finalizer, which closes the parent's connections on the child's event loop and logs a RuntimeError."""
RANGE_BYTES = 8 << 20
""":meth:`Storage.download` reads through fsspec in ranges of this size, each retried on its own."""


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
        self._signed_gets = signed_get.plain_s3_settings(s3_options(self.storage_options))
        """Whether S3 fetches go by signed GETs: the settings allow it, and no store refused one."""
        self._filesystems: dict[str, Any] = {}
        self._lock = ForkSafeLock()
        self._pid = os.getpid()
        self._ignoring_hosts: set[str] = set()
        """Hosts found answering ranged GETs with whole objects (said once, in the log)."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_filesystems"], state["_lock"] = {}, None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = ForkSafeLock()

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
        its modification time (:func:`~loaderfactory.shards.storage.object_version.version_of`); ``""`` for a
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
        (:func:`loaderfactory.shards.storage.http_range.read_range`)."""
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
        holding the GIL (:mod:`~loaderfactory.shards.storage.signed_get`), a failed attempt retried from the
        byte reached; anything else by ``RANGE_BYTES`` ranges, each retried on its own, and so does
        the rest of the object and every later one once the store refuses a signed GET. A server that
        ignores ``Range`` sends the rest of the object at once, which is taken whole.

        ``cancel`` (else the event of :func:`~loaderfactory.shards.storage.cancel.cancelled_by`) set stops it
        with InterruptedError: a :class:`~loaderfactory.shards.storage.cancel.Cancel` at once, whatever the
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
                failure = transient(url, err)
                if attempt == self.retries:
                    raise StorageError(gave_up(url, self.retries, failure)) from err
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
        return open_filesystem(scheme, self.storage_options)


def _host(url: str) -> str:
    """``scheme://host:port`` of a URL."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _url_of(scheme: str, path: str) -> str:
    return path if "://" in path else f"{scheme}://{path}"
