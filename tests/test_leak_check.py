"""The autouse leak check itself: it sees leaked threads, children and shared memory, and fails the test.

Only what the test run's own process tree made counts, so a busy machine's other processes (another
test run's semaphores) never fail a test here.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import uuid
from multiprocessing import shared_memory
from pathlib import Path

import conftest
import pytest
from process_checks import SHM, shm_names, tree_pids

pytest_plugins = ["pytester"]
needs_shm = pytest.mark.skipif(not SHM.is_dir(), reason="needs a /dev/shm folder")


def _nested_conftest(pytester: pytest.Pytester) -> None:
    """The real leak check, with a short grace so that the failing inner tests fail fast."""
    source = Path(conftest.__file__).read_text().replace("GRACE_S = 10.0", "GRACE_S = 0.2")
    assert "GRACE_S = 0.2" in source
    pytester.makeconftest(source)


@pytest.mark.allow_leaks
def test_checker_functions_detect_each_kind_of_leak() -> None:
    """A deliberately leaked thread, child process and /dev/shm segment all show up, then are cleaned up."""
    threads, children, segments, pids = conftest._threads(), conftest._children(), shm_names(), tree_pids()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="deliberate-leak")
    thread.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    segment = shared_memory.SharedMemory(create=True, size=64)
    try:
        assert thread in conftest._threads() - threads
        assert child.pid in conftest._children() - children
        if SHM.is_dir():
            assert segment.name.lstrip("/") in conftest._segments(segments, pids)
    finally:
        stop.set()
        thread.join()
        child.kill()
        child.wait()
        segment.close()
        segment.unlink()
    assert thread not in conftest._threads()
    assert child.pid not in conftest._children()
    assert not conftest._segments(segments, pids)


def test_fixture_fails_a_test_that_leaks_a_thread(pytester: pytest.Pytester) -> None:
    """Run in a nested session, a test that leaves a thread running fails with the thread's name."""
    _nested_conftest(pytester)
    pytester.makepyfile(
        test_inner="""
        import threading

        STOP = threading.Event()

        def test_leaks():
            threading.Thread(target=STOP.wait, name="inner-leak", daemon=True).start()

        def test_clean():
            t = threading.Thread(target=lambda: None, name="inner-clean")
            t.start()
            t.join()

        def test_zz_cleanup():
            STOP.set()
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    expected = "ERROR test_inner.py::test_leaks - Failed: threads left running: ['inner-leak']"
    assert expected in result.stdout.str()


FOREIGN_HOLDER = """
import contextlib, mmap, os, sys
if os.fork():
    os._exit(0)  # the grandchild goes on outside the test's process tree
held, orphan = "{shm}/lf_foreign_{tag}", f"{shm}/torch_{{os.getpid()}}_foreign_{tag}"
fd = os.open(held, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
mapping = mmap.mmap(fd, 4096)  # held by a process of another tree
os.close(os.open(orphan, os.O_CREAT | os.O_WRONLY, 0o600))  # torch's name, with a pid not ours
print(held, orphan, flush=True)
sys.stdin.read()  # until the test closes the pipe
for path in (held, orphan):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
"""

INNER_SEGMENT_TESTS = """
import mmap, os, subprocess, sys

HOLDER, HELD = [], []

def test_foreign_segments():
    holder = subprocess.Popen(
        [sys.executable, "-c", {holder!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    HOLDER.append(holder)
    names = holder.stdout.readline().split()
    holder.wait(30)  # the grandchild that made the names is no descendant of ours now
    assert len(names) == 2 and all(os.path.exists(name) for name in names)

def test_leaks_a_held_segment():
    fd = os.open("{shm}/lf_held_{tag}", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 4096)
    HELD.append((fd, mmap.mmap(fd, 4096)))

def test_leaks_a_torch_name():
    os.close(os.open(f"{shm}/torch_{{os.getpid()}}_leak_{tag}", os.O_CREAT | os.O_WRONLY, 0o600))

def test_zz_cleanup():
    for holder in HOLDER:
        holder.stdin.close()
        holder.stdout.close()
    for fd, mapping in HELD:
        mapping.close()
        os.close(fd)
    os.unlink("{shm}/lf_held_{tag}")
    os.unlink(f"{shm}/torch_{{os.getpid()}}_leak_{tag}")
"""


@needs_shm
def test_only_segments_of_this_process_tree_fail_a_test(pytester: pytest.Pytester) -> None:
    """Names another process made (held or orphaned, torch's pattern included) pass; the test's own
    held segment and torch-named leftover fail it, each by name."""
    _nested_conftest(pytester)
    tag = uuid.uuid4().hex
    holder = FOREIGN_HOLDER.format(shm=SHM, tag=tag)
    pytester.makepyfile(test_inner=INNER_SEGMENT_TESTS.format(holder=holder, shm=SHM, tag=tag))
    try:
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    finally:
        for path in SHM.glob(f"*{tag}"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    result.assert_outcomes(passed=4, errors=2)
    out = result.stdout.str()
    assert "ERROR test_inner.py::test_leaks_a_held_segment" in out
    assert "ERROR test_inner.py::test_leaks_a_torch_name" in out
    left = "shared-memory segments left in /dev/shm"
    assert f"{left}: ['lf_held_{tag}']" in out
    assert f"{left}: ['torch_{os.getpid()}_leak_{tag}']" in out  # the nested session runs in this process
    assert "foreign" not in out
