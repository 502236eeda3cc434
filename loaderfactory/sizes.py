"""Sizes written as text (``"2GiB"``, ``"512MB"``): one parser for specs and runtime alike.

The spec layer's size fields (``ram_budget``, ``shuffle_memory``, ``pack.shard_size``) and ``pack()``'s
``shard_size`` argument read sizes here. Importing it loads pydantic (its ``ByteSize`` unit table), so
runtime modules import it where a size string arrives, not at their top.
"""

from __future__ import annotations

import re
from decimal import Decimal

from pydantic import ByteSize

SIZE_PATTERN = r"^\s*\d+(\.\d+)?\s*([KMGTkmgt][iI]?[Bb]|[Bb])\s*$"
"""What :func:`parse_size` reads, as a JSON-schema ``pattern`` (no flags: cases spelled out)."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)\s*$", re.IGNORECASE)


def parse_size(text: str) -> ByteSize:
    """``"2GiB"`` → 2147483648 bytes; raises ``ValueError`` naming the accepted units.

    Stricter than ``pydantic.ByteSize`` on its own, whose unit table it uses: a unit is required
    (a bare ``2`` is too easily meant as 2 GB) and a fraction is exact (``Decimal``: ByteSize's
    float arithmetic turns ``"17589.6GB"`` into a few bytes less).
    """
    match = _SIZE.match(text)
    if not match:
        raise ValueError(
            f"{text!r} is not a size; write a number and a unit, e.g. '512MiB' or '2GB' "
            "(units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    number, unit = match.groups()
    return ByteSize(int(Decimal(number) * int(ByteSize.byte_sizes[unit.lower()])))
