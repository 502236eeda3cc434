"""A byte range of an ``http(s)://`` object through fsspec's session, right whether or not the server
honours ``Range``.

Object stores answer ``Range: bytes=a-b`` with 206 and those bytes; a plain file server (``python -m
http.server``) answers 200 with the whole object. fsspec's ``cat_file`` returns either body as it
came, so a reader asking for bytes ``a-b`` got the object from its start and saw a "truncated"
shard. Here a 200 answer is read from its start and the bytes asked for are taken from it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from loaderfactory.shards.errors import changed_during_fetch

CHUNK_BYTES = 1 << 20
"""Bytes read from a whole-object answer at a time, up to the end of the range."""


def read_range(
    fs: Any,
    url: str,
    start: int,
    end: int,
    rest_too: bool,
    ignored: Callable[[str], None],
    size: int | None = None,
) -> Callable[[], Coroutine[Any, Any, bytes]]:
    """A maker of coroutines (one per attempt) giving bytes ``[start, end)`` of ``url``, fewer where it
    ends before ``end``; with ``rest_too``, a server's whole-object answer gives everything after
    ``start``. ``ignored(url)`` is called when the server sent the whole object.

    Raises FileNotFoundError (404), aiohttp's ClientResponseError (another failing status), or
    StorageError where ``size`` (the object's size expected) is not the one the answer's headers
    tell (the object changed since its size was asked).
    """

    async def attempt() -> bytes:
        options = dict(fs.kwargs)
        headers = {**(options.pop("headers", None) or {}), "Range": f"bytes={start}-{end - 1}"}
        session = await fs.set_session()
        async with session.get(fs.encode_url(url), headers=headers, **options) as response:
            if response.status == 404:
                raise FileNotFoundError(url)
            response.raise_for_status()
            told = object_size(response.status, response.headers)
            if size is not None and told is not None and told != size:
                raise changed_during_fetch(url, told, size)
            if response.status == 206:
                return bytes(await response.read())
            ignored(url)  # 200: the whole object, from its first byte
            if rest_too:
                return bytes(await response.read())[start:]
            body = bytearray()
            while len(body) < end:
                chunk = await response.content.read(min(CHUNK_BYTES, end - len(body)))
                if not chunk:
                    break
                body += chunk
            return bytes(body[start:end])

    return attempt


def object_size(status: int, headers: Mapping[str, str]) -> int | None:
    """The whole object's size an answer's headers tell: a 206's ``Content-Range: bytes a-b/TOTAL``,
    a 200's ``Content-Length``; None where they tell none (``/*``, an encoded or chunked body)."""
    if status == 206:
        total = (headers.get("Content-Range") or "").rpartition("/")[2].strip()
        return int(total) if total.isdigit() else None
    length = headers.get("Content-Length")
    if status == 200 and length is not None and length.isdigit() and not headers.get("Content-Encoding"):
        return int(length)
    return None
