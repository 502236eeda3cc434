"""Expand what a user writes for ``urls`` into the sorted list of shard URLs it means.

Accepted: a list of URLs; a brace pattern (``train-{000000..000127}.tar``: a zero-padded range,
``{a,b}``: alternatives, several braces multiply); a folder or prefix ending in ``/``
(``s3://bucket/train/``: its ``.tar`` and ``.parquet`` objects); a local glob (``data/*.tar``).
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import itertools
import os
import re
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from loaderfactory.shards.errors import ShardNotFoundError
from loaderfactory.shards.storage.remote_errors import missing
from loaderfactory.shards.storage.store import Storage, is_remote, split_scheme

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
    rest = split_scheme(urls)[1]
    if _is_folder(urls):
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


def _is_folder(urls: str) -> bool:
    """Whether ``urls`` (no braces) is a folder or prefix, listed with its subfolders."""
    scheme, rest = split_scheme(urls)
    return urls.endswith("/") or (scheme == "file" and os.path.isdir(rest))


def listed_by(urls: str | Sequence[str]) -> Callable[[str], bool] | None:
    """Whether a shard URL is one that listing ``urls`` gives when it is there: a shard under a
    folder or prefix, a match of a local glob; None when ``urls`` names its shards one by one (a
    list of URLs, a brace pattern), each then read or reported missing."""
    if not isinstance(urls, str):
        tests = [test for test in map(listed_by, urls) if test is not None]
        return None if not tests else lambda url: any(test(url) for test in tests)
    scheme, rest = split_scheme(urls)
    if "{" in urls:
        return None
    if _is_folder(urls):
        local = f"{Path(rest)}".rstrip("/") + "/"  # as Storage.list writes the paths it finds
        under = urls if scheme != "file" else f"file://{local}" if urls.startswith("file://") else local
        return lambda url: url.startswith(under) and is_shard(url)
    if not is_remote(urls) and glob.has_magic(rest):
        patterns = urls.split("/")
        return lambda url: _glob_matches(url.split("/"), patterns)
    return None


def _glob_matches(parts: list[str], patterns: list[str]) -> bool:
    """Whether ``glob.glob`` of the pattern split as ``patterns`` gives the path split as ``parts``
    (a wildcard matches no ``/``, nor a leading dot)."""
    return len(parts) == len(patterns) and all(
        fnmatch.fnmatchcase(part, pattern) and (pattern.startswith(".") or not part.startswith("."))
        for part, pattern in zip(parts, patterns, strict=True)
    )


def check_listing(
    urls: str | Sequence[str],
    listed: Collection[str],
    indexed: Sequence[str],
    index: str,
    fix: str = "index the shards again (run.mode=index) to read without it",
) -> None:
    """ShardNotFoundError naming a shard of the index at ``index`` that the folder, prefix or glob
    ``urls`` stands for but whose listing (``listed``) lacks: deleted since it was indexed, which a
    reader must not pass over as if the data set had always been smaller; ``fix`` says what to do
    instead of putting it back."""
    stands_for = listed_by(urls)
    if stands_for is None:
        return
    present = set(listed)
    gone = [url for url in indexed if stands_for(url) and url not in present]
    if gone:
        raise ShardNotFoundError(
            errno.ENOENT,
            f"no such shard or object, although the index {index} lists it under {urls!r} "
            f"({len(gone)} shard(s) it lists there are gone); put it back, or {fix}",
            gone[0],
        )
