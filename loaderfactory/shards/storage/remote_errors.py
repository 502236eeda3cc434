"""What a failed remote call means: a failure a retry may fix, or an error to raise at once naming the
URL; and what the error says once the retries are spent."""

from __future__ import annotations

import errno

from loaderfactory.shards.errors import ShardNotFoundError, StorageError
from loaderfactory.shards.storage import signed_get


def missing(url: str) -> ShardNotFoundError:
    """The error for an object that does not exist, naming its URL."""
    return ShardNotFoundError(errno.ENOENT, "no such shard or object (check the URL and the bucket)", url)


def short_answer(url: str, received: int, size: int) -> StorageError:
    """The error of a fetch that got ``received`` bytes of the ``size`` the object has."""
    return StorageError(
        f"{url}: the server sent {received} bytes of the {size} the object has, and nothing was "
        "cached: an answer cut short (or too long) by the server or the network, not a fault of the "
        "shard; check the server or proxy and run again"
    )


def transient(url: str, err: Exception) -> BaseException:
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


def gave_up(url: str, retries: int, failure: BaseException) -> str:
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


def _described(err: BaseException) -> str:
    """``"Type: first line"``, or the type alone for an error without a message (a timeout)."""
    line = _first_line(err)
    return f"{type(err).__name__}: {line}" if line else type(err).__name__


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else ""
