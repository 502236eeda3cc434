"""Copy an S3 object into a file through one presigned GET, reading its bytes without holding the GIL.

s3fs reads a response body on its event-loop thread, 64 KiB at a time with Python work on each
piece: about 2 CPU-seconds per GB, most of it holding the GIL, which the thread reading samples
beside it then waits for. Here the standard library reads the body straight into a buffer
(``readinto`` on the socket, the GIL released while the bytes arrive) and writes it out.

s3fs still signs the URL (its credentials, endpoint, region and addressing), so the request is the
one s3fs would send, as long as the settings add nothing to the request itself
(:func:`plain_s3_settings`); otherwise the caller reads through s3fs.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

from loaderfactory.shards.storage import http_range
from loaderfactory.shards.storage.cancel import stopping

PIECE_BYTES = 8 << 20
"""Bytes read into the buffer and written out at a time."""
SIGNED_FOR_S = 900
"""How long a signed URL stays valid: one is made per attempt, so this bounds one attempt."""
_PLAIN = {
    "storage_options": {"endpoint_url", "key", "secret", "token", "region", "anon", "profile", "use_ssl"},
    "client_kwargs": {"endpoint_url", "region_name"},
    "config_kwargs": {"retries", "connect_timeout", "read_timeout", "signature_version", "s3"},
}
"""Settings that change only how s3fs signs and addresses a GET, which a presigned URL carries."""


class SizeChanged(Exception):
    """The answer tells an object size other than the one expected (``told``): it was replaced."""

    def __init__(self, told: int) -> None:
        super().__init__(f"the answer tells an object of {told} bytes")
        self.told = told


class SignedUrlRefused(Exception):
    """The store answered a signed URL with a refusal or a redirect (a bucket in another region, a
    store without query-string signatures, a clock it finds skewed): read through s3fs instead."""


def plain_s3_settings(options: Mapping[str, Any]) -> bool:
    """Whether s3fs's GETs with ``options`` (after ``storage._s3_options``) are what a presigned URL
    reproduces: nothing like ``requester_pays``, extra request arguments (SSE-C keys), ``verify`` or
    proxies in the settings, which a plain ``urllib`` request would not send or honour."""
    nested = ("client_kwargs", "config_kwargs")
    if not set(options) <= _PLAIN["storage_options"] | set(nested):
        return False
    return all(set(options.get(name) or {}) <= _PLAIN[name] for name in nested)


def get_into(
    signed_url: str,
    start: int,
    end: int,
    out: BinaryIO,
    cancel: threading.Event | None,
    timeout_s: float,
    size: int | None = None,
) -> None:
    """Write bytes ``[start, end)`` of the object at ``signed_url`` to ``out``.

    Raises SizeChanged where the answer tells a size other than ``size`` (the object's size
    expected, if given; before writing anything of it), FileNotFoundError (404), SignedUrlRefused
    (a 3xx, a 4xx other than 404, 408, 416 and 429, or a range asked for and the whole object
    sent), InterruptedError (``cancel`` set: a
    :class:`~loaderfactory.shards.storage.cancel.Cancel` shuts the connection down at once, whatever the
    request waits for; a plain Event is seen between pieces), or the HTTP or connection error as it
    came (a 5xx, a reset, a timeout, a body ending early); what was written before the error stays
    written.
    """
    connection = _Connection()
    with stopping(cancel, connection.shut):
        try:
            with _open_range(signed_url, start, end, timeout_s, connection) as response:
                _check_answer(response, start, end, size)
                _copy_body(response, start, end, out, cancel)
        except (OSError, http.client.HTTPException) as err:
            if cancel is not None and cancel.is_set():
                raise InterruptedError("fetch into the cache cancelled") from err
            raise


def _open_range(
    signed_url: str, start: int, end: int, timeout_s: float, connection: _Connection
) -> http.client.HTTPResponse:
    """The answer to a GET of bytes ``[start, end)``; a refusal raised as :func:`get_into` says."""
    request = urllib.request.Request(signed_url, headers={"Range": f"bytes={start}-{end - 1}"})
    opener = urllib.request.build_opener(
        _HTTPHandler(connection.opened), _HTTPSHandler(_tls_context(), connection.opened)
    )
    try:
        response: http.client.HTTPResponse = opener.open(request, timeout=timeout_s)
    except urllib.error.HTTPError as err:
        err.close()
        if err.code == 404:
            raise FileNotFoundError(f"HTTP 404: {err.reason}") from err
        if 300 <= err.code < 500 and err.code not in (408, 416, 429):
            raise SignedUrlRefused(f"HTTP {err.code}: {err.reason}") from err
        raise
    return response


def _check_answer(response: http.client.HTTPResponse, start: int, end: int, size: int | None) -> None:
    """Refuse a whole object sent for a range (SignedUrlRefused) or one of another size (SizeChanged)."""
    if response.status != 206 and start > 0:
        raise SignedUrlRefused(f"asked for bytes {start}-{end - 1}, got HTTP {response.status}")
    headers: Any = response.headers  # an HTTPMessage: a Mapping for what object_size asks (get)
    told = http_range.object_size(response.status, headers)
    if size is not None and told is not None and told != size:
        raise SizeChanged(told)


def _copy_body(
    response: http.client.HTTPResponse, start: int, end: int, out: BinaryIO, cancel: threading.Event | None
) -> None:
    """Write the body of ``response`` (bytes ``[start, end)`` of the object) to ``out``, a piece at a time."""
    buffer = memoryview(bytearray(min(PIECE_BYTES, end - start)))
    position = start
    while position < end:
        if cancel is not None and cancel.is_set():
            raise InterruptedError("fetch into the cache cancelled")
        piece = buffer[: min(len(buffer), end - position)]
        filled = 0
        while filled < len(piece):
            count = response.readinto(piece[filled:])
            if not count:
                raise ConnectionError(
                    f"the body ended at byte {position + filled} of {end}; did the object change?"
                )
            filled += count
        out.write(piece)
        position += filled


class _Connection:
    """The socket of the request in flight, shut down by :meth:`shut` (from any thread) so that a
    read blocked on it returns at once, or as soon as it connects when shut before."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._shut = False

    def opened(self, sock: socket.socket) -> None:
        with self._lock:
            self._socket, shut = sock, self._shut
        if shut:
            _shut_down(sock)

    def shut(self) -> None:
        with self._lock:
            sock, self._shut = self._socket, True
        if sock is not None:
            _shut_down(sock)


def _shut_down(sock: socket.socket) -> None:
    # The plain socket's shutdown, also under TLS: SSLSocket.shutdown would drop the TLS state that
    # the blocked read is using.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _reporting(
    base: type[http.client.HTTPConnection], opened: Callable[[socket.socket], None]
) -> Callable[..., http.client.HTTPConnection]:
    """A maker of ``base`` connections that tell ``opened`` their socket once connected."""

    def make(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
        connection = base(*args, **kwargs)
        connect = connection.connect

        def connect_and_report() -> None:
            connect()
            opened(connection.sock)

        connection.connect = connect_and_report  # type: ignore[method-assign]  # this one connection's
        return connection

    return make


class _HTTPHandler(urllib.request.HTTPHandler):
    """urllib's handler, its connections telling ``opened`` their socket."""

    def __init__(self, opened: Callable[[socket.socket], None]) -> None:
        super().__init__()
        self._opened = opened

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_reporting(http.client.HTTPConnection, self._opened), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    """urllib's TLS handler with ``context``, its connections telling ``opened`` their socket."""

    def __init__(self, context: ssl.SSLContext, opened: Callable[[socket.socket], None]) -> None:
        super().__init__(context=context)
        self._tls = context
        self._opened = opened

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_reporting(http.client.HTTPSConnection, self._opened), req, context=self._tls)


_CONTEXT: list[ssl.SSLContext] = []


def _tls_context() -> ssl.SSLContext:
    """Certificates checked as botocore checks them: against ``AWS_CA_BUNDLE``, else certifi's
    bundle where it is installed, else the system's."""
    if not _CONTEXT:
        bundle = os.environ.get("AWS_CA_BUNDLE")
        if not bundle:
            try:
                import certifi

                bundle = certifi.where()
            except ImportError:
                bundle = None
        _CONTEXT.append(ssl.create_default_context(cafile=bundle))
    return _CONTEXT[0]
