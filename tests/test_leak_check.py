"""The autouse leak check itself: it sees leaked threads, children and shared memory, and fails the test."""

from __future__ import annotations

import subprocess
import sys
import threading
from multiprocessing import shared_memory
from pathlib import Path

import conftest
import pytest

pytest_plugins = ["pytester"]


@pytest.mark.allow_leaks
def test_checker_functions_detect_each_kind_of_leak() -> None:
    """A deliberately leaked thread, child process and /dev/shm segment all show up, then are cleaned up."""
    threads, children, segments = conftest._threads(), conftest._children(), conftest._segments()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="deliberate-leak")
    thread.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    segment = shared_memory.SharedMemory(create=True, size=64)
    try:
        assert thread in conftest._threads() - threads
        assert child.pid in conftest._children() - children
        if conftest.SHM.is_dir():
            assert segment.name.lstrip("/") in conftest._segments() - segments
    finally:
        stop.set()
        thread.join()
        child.kill()
        child.wait()
        segment.close()
        segment.unlink()
    assert thread not in conftest._threads()
    assert child.pid not in conftest._children()
    assert conftest._segments() <= segments


def test_fixture_fails_a_test_that_leaks_a_thread(pytester: pytest.Pytester) -> None:
    """Run in a nested session, a test that leaves a thread running fails with the thread's name."""
    source = Path(conftest.__file__).read_text().replace("GRACE_S = 5.0", "GRACE_S = 0.2")
    assert "GRACE_S = 0.2" in source
    pytester.makeconftest(source)
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
