"""Byte sizes written the way people write them: ``"512MiB"``, ``"2GB"``, ``"1.5GiB"``.

Shared by the specs and the runtime components, so it imports neither pydantic nor torch.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["parse_size"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def parse_size(text: str) -> int:
    """``"2GiB"`` → 2147483648; raises ``ValueError`` naming the accepted units."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(
            f"{text!r} is not a size; write a number and a unit, e.g. '512MiB' or '2GB' "
            "(units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    number, unit = match.groups()
    # Decimal, not float: "2.3KB" is 2300 bytes, where float arithmetic would give 2299.
    return int(Decimal(number) * _UNITS[unit.lower()])
