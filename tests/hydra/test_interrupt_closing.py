"""Ctrl-C while the loader closes: the close runs to its end, so nothing it owns outlives the run
(a pool of download threads left open runs its whole queue as the process exits)."""

from __future__ import annotations

import json
import re
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from command_process import finish, read_until, start_command

from loaderfactory import Loader

FETCHING = '''
import sys
import threading
from concurrent.futures import ThreadPoolExecutor


class Fetching:
    """Eight items, and downloads ahead as a shards dataset has them: a pool of threads (not daemons)
    with one fetch in flight and three queued, each 30 s unless cancelled. close() first finishes a
    step that waits (here: for a line on stdin, sent once Ctrl-C was pressed), then cancels them."""

    def __init__(self):
        self._cancel = threading.Event()
        self._pool = ThreadPoolExecutor(1)
        for _ in range(4):
            self._pool.submit(self._cancel.wait, 30)

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return {"id": index}

    def close(self):
        print("closing", file=sys.stderr, flush=True)
        sys.stdin.readline()
        self._cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
'''


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["run", "pack"])
def test_ctrl_c_while_the_dataset_closes_lets_the_close_finish(tmp_path: Path, mode: str) -> None:
    """SIGINT inside the dataset's ``close()`` (the loader's last stage; in ``run.mode=pack``, once
    the shards are written): the close still cancels its downloads, so the command ends at once with
    status 130, and a run's report is marked interrupted (the close was cut, the downloads ran their
    queue at exit: two minutes)."""
    (tmp_path / "lf_fetching.py").write_text(textwrap.dedent(FETCHING))
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "loaderfactory",
        "~dataset",
        "+dataset={_target_: lf_fetching.Fetching}",
        "loader.batch_size=2",
        "run.batches=2",
        f"run.mode={mode}",
        f"pack.out={tmp_path / 'packed'}",
        "run.plots=false",
        "run.progress=false",
        f"hydra.run.dir={run_dir}",
    ]
    process = start_command(command, tmp_path, stdin=True)
    assert process.stdin is not None and process.stderr is not None
    try:
        before = read_until(process.stderr.fileno(), lambda seen: b"closing" in seen, "closing", 90.0)
        process.send_signal(signal.SIGINT)
        process.stdin.write(b"go on\n")
        process.stdin.flush()
        _, err = finish(process, timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    stderr = (before + err).decode()
    assert process.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    if mode == "pack":
        assert last == "loaderfactory: interrupted during run.mode=pack, which writes no report", last
        return
    found = re.fullmatch(r"loaderfactory: interrupted after 2 batches; partial report in (.+)", last)
    assert found, last
    report = json.loads(Path(found[1]).read_text())
    assert report["interrupted"] is True and report["stage"] in ("closing", "reporting"), report


class _Closes:
    """A stage whose ``close()`` records itself, or raises ``KeyboardInterrupt`` (Ctrl-C landing in it)."""

    def __init__(self, closed: list[str], name: str, interrupted: bool = False) -> None:
        self.closed, self.name, self.interrupted = closed, name, interrupted

    def __iter__(self) -> Iterator[int]:
        return iter(range(4))

    def close(self) -> None:
        if self.interrupted:
            raise KeyboardInterrupt
        self.closed.append(self.name)


def test_a_stage_whose_close_is_interrupted_leaves_no_stage_before_it_open() -> None:
    """Ctrl-C inside the last stage's ``close()`` (Python's own handler raises at once): the stages
    before it are closed still, then the ``KeyboardInterrupt`` is raised."""
    closed: list[str] = []
    stages = {
        "dataset": _Closes(closed, "dataset"),
        "loader": _Closes(closed, "loader"),
        "prefetch": _Closes(closed, "prefetch", interrupted=True),
    }
    loader = Loader(stages)
    with pytest.raises(KeyboardInterrupt):
        loader.close()
    assert closed == ["loader", "dataset"]
