"""The fsspec filesystem of a remote scheme, opened with the arguments each one needs (``s3``:
s3fs's own retries off and bounded timeouts; ``http(s)``: bounded request timeouts; ``gs``: gcsfs's
JSON API)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from loaderfactory.remote_extras import SCHEME_PACKAGES, install_command
from loaderfactory.shards.storage import fork_loops  # noqa: F401  # at-fork hooks of fsspec loops

PROTOCOLS = {"s3": "s3", "gs": "gcs", "http": "http", "https": "https"}
"""fsspec's protocol name of each remote scheme."""
HTTP_TIMEOUTS_S = {"sock_connect": 5.0, "sock_read": 60.0}
"""Bounds on each ``http(s)://`` request, as S3's have: a server that accepts a request and never
answers fails it (and it is retried) after ``sock_read`` seconds, not aiohttp's default 5 minutes."""


def open_filesystem(scheme: str, storage_options: Mapping[str, Any]) -> Any:
    """A new fsspec filesystem for ``scheme`` with ``storage_options``; ImportError saying what to
    install when its package is missing."""
    try:
        import fsspec  # type: ignore[import-untyped]  # fsspec ships no type stubs

        fsspec.get_filesystem_class(PROTOCOLS[scheme])
    except ImportError as err:
        raise ImportError(
            f"{scheme}:// URLs need fsspec and {SCHEME_PACKAGES[scheme]}: {install_command(scheme)}"
        ) from err
    options = dict(storage_options)
    if scheme == "s3":
        options = s3_options(options)
    if scheme == "gs":
        return _gcs_filesystem(options)
    if scheme in ("http", "https"):
        options = _http_options(options)
    # skip_instance_cache: fsspec would hand every Storage the same object, retries setting included.
    fs = fsspec.filesystem(PROTOCOLS[scheme], skip_instance_cache=True, **options)
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


def s3_options(settings: Mapping[str, Any]) -> dict[str, Any]:
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
