"""Read and write objects by URL: local paths and ``file://`` directly, remote schemes through obstore.

Remote schemes (``s3://``, ``gs://``, ``http(s)://``) need the ``remote`` extra
(``pip install loaderfactory[remote]``, which installs obstore). S3 settings come from
``storage_options`` (``endpoint_url``, ``key``, ``secret``, ``token``, ``region``, or any obstore S3
config key) or else from the standard AWS environment variables, ``AWS_ENDPOINT_URL`` included.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from loaderfactory.shards.errors import StorageError

T = TypeVar("T")
REMOTE_SCHEMES = ("s3", "gs", "http", "https")
_S3_ALIASES = {
    "endpoint_url": "endpoint",
    "key": "access_key_id",
    "secret": "secret_access_key",
    "token": "session_token",
}


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


def missing(url: str) -> FileNotFoundError:
    """The error for an object that does not exist, naming its URL."""
    return FileNotFoundError(errno.ENOENT, "no such shard or object (check the URL and the bucket)", url)


class Storage:
    """Lists, sizes, reads (whole or a byte range) and writes objects by URL, retrying transient errors.

    Args:
        storage_options: settings for remote stores (see the module docstring); local paths ignore them.
        retries: how many times a failing remote call is retried, with exponential backoff starting
            at ``backoff_s``; :attr:`retried` counts the retries made. A missing object is never retried.
        backoff_s: the first wait between retries; it doubles each time.

    Picklable: a copy in a worker process opens its own connections on first use.
    """

    def __init__(
        self, storage_options: Mapping[str, Any] | None = None, retries: int = 3, backoff_s: float = 0.1
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be ≥ 0, got {retries}")
        self.storage_options = dict(storage_options or {})
        self.retries = retries
        self.backoff_s = backoff_s
        self.retried = 0
        self._stores: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_stores"], state["_lock"] = {}, None
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
            return sorted(
                str(p) if "://" not in url else f"file://{p}" for p in folder.rglob("*") if p.is_file()
            )
        import obstore

        store, prefix = self._store(scheme, rest)
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        base = url[: len(url) - len(rest)] + rest.split("/", 1)[0]
        pages = self._retry(url, lambda: list(obstore.list(store, prefix=prefix or None)))
        return sorted(f"{base}/{meta['path']}" for page in pages for meta in page)

    def size(self, url: str) -> int:
        """The size of the object at ``url`` in bytes."""
        scheme, rest = split_scheme(url)
        if scheme == "file":
            try:
                return os.stat(rest).st_size
            except FileNotFoundError as err:
                raise missing(url) from err
        import obstore

        store, key = self._store(scheme, rest)
        return int(self._retry(url, lambda: obstore.head(store, key))["size"])

    def read(self, url: str) -> bytes:
        """The whole object at ``url``."""
        scheme, rest = split_scheme(url)
        if scheme == "file":
            try:
                return Path(rest).read_bytes()
            except FileNotFoundError as err:
                raise missing(url) from err
        import obstore

        store, key = self._store(scheme, rest)
        return self._retry(url, lambda: bytes(obstore.get(store, key).bytes()))

    def read_range(self, url: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object at ``url`` (fewer where the object ends before ``end``)."""
        if end <= start:
            return b""
        scheme, rest = split_scheme(url)
        if scheme == "file":
            try:
                with open(rest, "rb") as file:
                    file.seek(start)
                    return file.read(end - start)
            except FileNotFoundError as err:
                raise missing(url) from err
        import obstore

        store, key = self._store(scheme, rest)
        return self._retry(url, lambda: bytes(obstore.get_range(store, key, start=start, end=end)))

    def write(self, url: str, data: bytes) -> None:
        """Write ``data`` as the object at ``url`` (a local file appears whole: written aside, renamed)."""
        scheme, rest = split_scheme(url)
        if scheme == "file":
            path = Path(rest)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
            partial.write_bytes(data)
            partial.replace(path)
            return
        import obstore

        store, key = self._store(scheme, rest)
        self._retry(url, lambda: obstore.put(store, key, data))

    def _retry(self, url: str, call: Callable[[], T]) -> T:
        """Run ``call``; retry transient failures with backoff; name ``url`` in every error."""
        wait = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                return call()
            except FileNotFoundError as err:
                raise missing(url) from err
            except Exception as err:  # obstore's errors share no base class with OSError
                if type(err).__name__ == "NotFoundError":
                    raise missing(url) from err
                if _is_permanent(err):
                    raise StorageError(f"{url}: {type(err).__name__}: {_first_line(err)}") from err
                if attempt == self.retries:
                    raise StorageError(
                        f"{url}: failed after {self.retries} retries ({type(err).__name__}: "
                        f"{_first_line(err)}); is the server reachable and the endpoint right?"
                    ) from err
            self.retried += 1
            time.sleep(wait)  # backoff between attempts against a struggling server
            wait *= 2
        raise AssertionError("unreachable")

    def _store(self, scheme: str, rest: str) -> tuple[Any, str]:
        """The obstore store of the bucket (or host) in ``rest`` and the key inside it."""
        bucket, _, key = rest.partition("/")
        if os.getpid() != self._pid:  # a forked worker must not reuse its parent's connections
            self._stores, self._pid = {}, os.getpid()
        with self._lock:
            store = self._stores.get((scheme, bucket))
            if store is None:
                store = self._stores[(scheme, bucket)] = self._open(scheme, bucket)
        return store, key

    def _open(self, scheme: str, bucket: str) -> Any:
        try:
            from obstore.store import from_url
        except ImportError as err:
            raise ImportError(f"{scheme}:// URLs need obstore: pip install 'loaderfactory[remote]'") from err
        options = dict(self.storage_options)
        if scheme == "s3":
            options = {_S3_ALIASES.get(k, k): v for k, v in options.items()}
            endpoint = options.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL", "")
            options.setdefault("region", os.environ.get("AWS_REGION", "us-east-1"))
        else:
            endpoint = ""
        client: dict[str, Any] = {"connect_timeout": timedelta(seconds=5), "timeout": timedelta(seconds=60)}
        if str(endpoint).startswith("http://") or scheme == "http":
            client["allow_http"] = True
        # Our own loop retries (and counts); obstore's would retry for up to 3 minutes unseen.
        no_retry = {
            "max_retries": 0,
            "retry_timeout": timedelta(seconds=1),
            "backoff": {
                "init_backoff": timedelta(milliseconds=10),
                "max_backoff": timedelta(milliseconds=10),
                "base": 2.0,
            },
        }
        open_store: Any = from_url  # its overloads are per store; the options are the user's, per scheme
        return open_store(f"{scheme}://{bucket}", client_options=client, retry_config=no_retry, **options)


def _is_permanent(err: Exception) -> bool:
    """Errors that retrying cannot fix: bad credentials, bad config, a refused permission."""
    permanent = (
        "PermissionDeniedError",
        "UnauthenticatedError",
        "UnknownConfigurationKeyError",
        "InvalidPathError",
        "NotSupportedError",
    )
    return type(err).__name__ in permanent or isinstance(err, (PermissionError, ValueError, TypeError))


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else ""
