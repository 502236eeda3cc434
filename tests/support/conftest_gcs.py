"""The session's GCS emulator, started once for every test that asks for ``gcs``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gcs_server import GcsServer, emulator_installed, gcs_emulator


@pytest.fixture(scope="session")
def gcs() -> Iterator[GcsServer]:
    """A running GCS emulator with an empty bucket; skipped only where it or gcsfs is not installed."""
    if not emulator_installed():
        pytest.skip("the GCS emulator or gcsfs is not installed (pip install gcp-storage-emulator gcsfs)")
    with gcs_emulator(bucket="shards-test") as server:
        yield server
