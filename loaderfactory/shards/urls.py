"""Expand what a user writes for ``urls`` into the sorted list of shard URLs it means.

Accepted: a list of URLs; a brace pattern (``train-{000000..000127}.tar``: a zero-padded range,
``{a,b}``: alternatives, several braces multiply); a folder or prefix ending in ``/``
(``s3://bucket/train/``: its ``.tar`` and ``.parquet`` objects); a local glob (``data/*.tar``).
"""

from __future__ import annotations

import glob
import itertools
import os
import re
from collections.abc import Sequence

from loaderfactory.shards.storage import Storage, is_remote, missing, split_scheme

SHARD_SUFFIXES = (".tar", ".parquet")
_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")


def _alternatives(body: str, pattern: str) -> list[str]:
    """The strings one ``{...}`` stands for: ``0..3`` → 0,1,2,3 (padded to the first bound's width)."""
    found = _RANGE.match(body)
    if found:
        first, last = found.groups()
        if int(last) < int(first):
            raise ValueError(f"{pattern}: range {{{body}}} counts down; write {{{last}..{first}}}")
        width = len(first) if first.startswith("0") or len(first) == len(last) else 0
        return [str(n).zfill(width) for n in range(int(first), int(last) + 1)]
    if "," in body:
        return body.split(",")
    raise ValueError(
        f"{pattern}: {{{body}}} is neither a range like {{000..127}} nor alternatives like {{a,b}}"
    )


def expand_braces(pattern: str) -> list[str]:
    """Every string a brace pattern stands for, in the pattern's order (no braces: the pattern itself)."""
    pieces = _BRACE.split(pattern)
    literals, bodies = pieces[0::2], pieces[1::2]
    if any("{" in lit or "}" in lit for lit in literals):
        raise ValueError(f"{pattern}: unbalanced or nested braces")
    choices = [_alternatives(body, pattern) for body in bodies]
    out = []
    for combo in itertools.product(*choices):
        parts = [literals[0]]
        for value, literal in zip(combo, literals[1:], strict=True):
            parts += [value, literal]
        out.append("".join(parts))
    return out


def is_shard(url: str) -> bool:
    """True for the objects a folder or prefix contributes: ``.tar`` and ``.parquet``."""
    return url.endswith(SHARD_SUFFIXES)


def expand_urls(urls: str | Sequence[str], storage: Storage | None = None) -> list[str]:
    """The shard URLs ``urls`` stands for; a folder, prefix or glob is listed (sorted), a list kept in order.

    Raises FileNotFoundError naming the pattern when it matches nothing.
    """
    if not isinstance(urls, str):
        return [url for item in urls for url in expand_urls(item, storage)]
    if "{" in urls:
        return expand_braces(urls)
    scheme, rest = split_scheme(urls)
    if urls.endswith("/") or (scheme == "file" and os.path.isdir(rest)):
        found = [url for url in (storage or Storage()).list(urls) if is_shard(url)]
        if not found:
            raise FileNotFoundError(f"{urls}: no {' or '.join(SHARD_SUFFIXES)} shards under this folder")
        return found
    if not is_remote(urls) and glob.has_magic(rest):
        found = sorted(glob.glob(rest))
        if not found:
            raise missing(urls)
        return [f"file://{p}" for p in found] if urls.startswith("file://") else found
    return [urls]
