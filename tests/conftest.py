"""Shared fixtures: every test must leave no thread, child process or shared-memory segment behind.

Only what this test run's own process tree made counts: the machine may be shared with other test
runs, whose processes and ``/dev/shm`` names come and go meanwhile (see ``segments_of_tree``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import psutil
import pytest
from cli_forks import CLI_FORKS, PYTHONPATH, CliForks
from hypothesis import settings
from process_checks import SIGNALLED, segments_of_tree, shm_names, tree_pids, watch_signals

pytest_plugins = ["conftest_s3", "conftest_gcs"]  # the S3 server and GCS emulator, for the shards tests

settings.register_profile("shared-machine", deadline=None)
settings.load_profile("shared-machine")  # a busy machine makes any per-example deadline a coin toss

GRACE_S = 10.0
"""How long a test's leftovers get to wind down on their own before they count as leaks (a loaded
machine may take seconds to reap a worker); a clean test never waits for it."""


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive()}


def _children() -> set[int]:
    alive = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # it may exit between the listing and the status call
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.add(child.pid)
    return alive


def _segments(since: set[str], pids: set[int]) -> set[str]:
    """The ``/dev/shm`` names new since ``since`` that this process tree (and ``pids``) made or holds."""
    return segments_of_tree(shm_names() - since, pids | tree_pids() | SIGNALLED)


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it leaves threads, child processes or /dev/shm segments of its own alive."""
    if request.node.get_closest_marker("allow_leaks"):
        yield
        return
    SIGNALLED.clear()
    threads, children, segments, pids = _threads(), _children(), shm_names(), tree_pids()
    yield
    deadline = time.monotonic() + GRACE_S
    while True:
        new_threads = [t for t in _threads() - threads if not t.name.startswith(("pydevd", "Thread-tqdm"))]
        new_children = _children() - children
        new_segments = _segments(segments, pids)
        if not (new_threads or new_children or new_segments) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    problems = []
    if new_threads:
        problems.append(f"threads left running: {[t.name for t in new_threads]}")
    if new_children:
        problems.append(f"child processes left running: {sorted(new_children)}")
        for pid in new_children:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
    if new_segments:
        problems.append(f"shared-memory segments left in /dev/shm: {sorted(new_segments)}")
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


@pytest.fixture(scope="session")
def cli_forks() -> Iterator[CliForks | None]:
    """One interpreter with torch and Hydra imported that ``tests.test_cli.cli`` forks per command run
    (see ``cli_forks.py``): a module of command tests asks for it with ``usefixtures``. With
    ``LF_TEST_CLI_FORKS=0`` every run starts its own interpreter, as a user's does."""
    if os.environ.get("LF_TEST_CLI_FORKS") == "0":
        yield None
        return
    server = CliForks(PYTHONPATH)
    CLI_FORKS.append(server)
    yield server
    CLI_FORKS.clear()
    server.close()


def pytest_configure(config: pytest.Config) -> None:
    watch_signals()
    config.addinivalue_line("markers", "allow_leaks: skip the leak check (only for tests of the check)")


XDIST_WORKERS_MAX = 4
"""``-n auto`` (pyproject's addopts) starts one worker a core up to this many: each worker starts its
own S3 and GCS servers and command fork servers, and the torchrun tests start up to 4 ranks."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return max(1, min(XDIST_WORKERS_MAX, len(os.sched_getaffinity(0))))
