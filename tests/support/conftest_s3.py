"""The session's S3 server: SeaweedFS on loopback, started once for every test that asks for ``s3``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loaderfactory.testing.s3 import SERVER_EXTRA, S3Server, seaweedfs, weed_binary, without_aws_environment


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """A running S3-compatible server with an empty bucket; skipped only where ``weed`` is not installed.

    The session's ``AWS_*`` variables are set aside while it runs: the tests reach it through
    ``storage_options``, and a profile or endpoint meant for real AWS must not redirect them."""
    weed = weed_binary()
    if weed is None:
        pytest.skip(f"SeaweedFS is not installed ({SERVER_EXTRA}; the test extra has it)")
    with without_aws_environment(), seaweedfs(bucket="shards-test", weed=weed) as server:
        yield server


@pytest.fixture(scope="session")
def fsspec_io_thread() -> None:
    """Start fsspec's one event-loop thread (``fsspecIO``, alive for the process by design) before a test
    takes its thread census, so a test's first remote read does not count it as a leak."""
    import fsspec.asyn

    fsspec.asyn.get_loop()
