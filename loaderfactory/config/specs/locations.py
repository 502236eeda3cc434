"""Which free-form arguments (a ``_target_``'s) say where the data lives rather than what it is.

A resumed run may read the same data from another place (``paths.data_dir`` changed, the files
copied to a local disk): such a difference is reported, not refused. Built-in specs name their
location fields (``location_fields``); a ``_target_``'s arguments are classified here, by name or
by value:

- by name: the argument's key, or the key of a list or dict holding it, ends in ``dir``, ``path``,
  ``root``, ``file``, ``folder``, ``directory``, ``location``, ``url`` or ``uri`` (a plural too), as
  a whole word of it: ``root``, ``data_dir``, ``csv_file``, ``imageRoot``, ``paths``;
- by value: both strings look like a location: an absolute path (``/data``, ``C:\\data``), one
  starting with ``~``, ``./`` or ``../``, or a URL (``s3://bucket/x``, ``https://...``).

Anything else that differs (``split: train``, a relative ``data/train`` under a plain name) is
refused; ``resume.locations`` lists more config paths to treat as locations.
"""

from __future__ import annotations

import re

LOCATION_WORDS = frozenset({"dir", "path", "root", "file", "folder", "directory", "location", "url", "uri"})
"""Last words of an argument name that mark it as a location (compared lower-case, a plural ``s`` off)."""

_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_LOCATION_VALUE = re.compile(r"^(/|\\\\|~|\.{1,2}[/\\]|[A-Za-z]:[/\\]|[A-Za-z][A-Za-z0-9+.-]*://)")


def names_location(key: str) -> bool:
    """Whether an argument name says it holds a location (``data_dir``, ``root``, ``imageRoot``)."""
    words = _WORD.findall(key)
    if not words:
        return False
    last = words[-1].lower()
    return last in LOCATION_WORDS or (last.endswith("s") and last[:-1] in LOCATION_WORDS)


def looks_like_location(value: str) -> bool:
    """Whether a string reads as a file path or URL by itself: absolute, ``~``, ``./``, ``../`` or
    ``scheme://``. A relative ``data/train`` does not (it may as well be a name like ``org/set``)."""
    return bool(_LOCATION_VALUE.match(value))


def is_location_argument(path: tuple[str, ...], saved: str, now: str) -> bool:
    """Whether a difference at ``path`` (keys and list indices) inside a ``_target_``'s arguments
    only moves the data: a location name on the path, or two location-like values."""
    keys = [key for key in path if not key.isdigit()]
    if keys[:1] == ["target"] or "_target_" in keys:  # which class: never a location
        return False
    return any(names_location(key) for key in keys) or (
        looks_like_location(saved) and looks_like_location(now)
    )
