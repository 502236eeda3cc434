"""What each remote URL scheme needs installed and the extra that installs it: one table for the
config layer (which checks without importing) and for the storage (which imports). Imports nothing."""

from __future__ import annotations

SCHEME_PACKAGES = {"s3": "s3fs", "gs": "gcsfs", "http": "aiohttp", "https": "aiohttp"}
"""The package each remote scheme needs besides fsspec."""
SCHEME_EXTRAS = {"s3": "s3", "gs": "gcs", "http": "http", "https": "http"}
"""The extra that installs fsspec and that package (``remote`` installs them all)."""


def install_command(scheme: str) -> str:
    """``pip install "loaderfactory[s3]"`` for ``s3``: the command that makes ``scheme://`` readable."""
    return f'pip install "loaderfactory[{SCHEME_EXTRAS[scheme]}]"'
