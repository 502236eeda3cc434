"""What a store says identifies one version of an object, as one short string."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TAGS = ("ETag", "generation", "etag", "LastModified", "Last-Modified", "updated", "mtime")
"""fsspec ``info`` keys naming a version, best first: S3's and HTTP's ETag, GCS's generation (its
etag changes with metadata too), other stores' etag, then modification times (S3, HTTP, GCS,
others)."""


def version_of(info: Mapping[str, Any]) -> str:
    """``"ETag:abc"``-style text of the first version tag in an fsspec ``info`` dict; ``""`` if none.

    The key is kept in the text, so tags of different kinds never compare equal by accident; an
    ETag's quotes and weak prefix (``W/"abc"``) are dropped.
    """
    for key in _TAGS:
        value = info.get(key)
        if value not in (None, ""):
            text = str(value)
            if key.lower() == "etag":
                text = text.removeprefix("W/").strip('"')
            return f"{key.lower()}:{text}"
    return ""


def same_version(expected: str, found: str) -> bool:
    """Whether two tags may name the same version: equal, or not comparable (one unknown, or of
    different kinds, as an index written beside local files and read from a bucket)."""
    if not expected or not found:
        return True
    return expected.split(":", 1)[0] != found.split(":", 1)[0] or expected == found
