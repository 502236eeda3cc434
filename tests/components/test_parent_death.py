"""Worker processes end with their trainer, however it ends, and let go of its stdout."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from process_checks import ROOT, alive, kill_survivors

EXIT_S = 10.0
"""How long after the trainer's death its workers may live on: a worker exits within
``PARENT_CHECK_S`` (0.5 s) or at once (SIGKILL from the kernel); 10 s is for a loaded machine, and
still rules out torch's own check (5 s), after which such a worker never exits."""

TRAINER = """
import json, os, sys, threading
import psutil
from loaderfactory import build_loader

# Batches of 4 x 25.6 KB: past a pipe's 64 KiB, and sent by value (under 512 KiB).
dataset = {"kind": "synthetic", "length": 64, "fields": {"x": {"shape": [6400], "dtype": "float32"}}}
configs = {
    "torch": {"loader": {"kind": "torch", "batch_size": 4, "num_workers": 2}},
    "torch+thread": {
        "loader": {"kind": "torch", "batch_size": 4, "num_workers": 2, "persistent_workers": True},
        "prefetch": {"kind": "thread", "buffer_size": 2},
    },
    "ram queue": {"queue": {"kind": "ram", "num_workers": 2, "worker_type": "process", "batch_size": 4}},
    "sharded": {"loader": {"kind": "sharded", "batch_size": 4, "num_workers": 2}},
    "torch, started on a thread": {
        "loader_of": {"loader": {"kind": "torch", "batch_size": 4, "num_workers": 2}},
    },
}

def started_on_a_thread(loader):
    # The thread that starts the workers ends at once: the kernel's parent-death signal, tied to
    # that thread, must not be what ends them (they serve the batches below), but a watcher.
    started = []
    thread = threading.Thread(target=lambda: started.append(iter(loader)))
    thread.start()
    thread.join()
    return started[0]

workers, iterators, seen = {}, [], set()
for name, config in configs.items():
    loader = build_loader({"dataset": dataset, **config.get("loader_of", config)})
    iterator = started_on_a_thread(loader) if "loader_of" in config else iter(loader)
    for _ in range(3):
        assert next(iterator)["x"].shape == (4, 6400)
    iterators.append(iterator)  # left unread: the workers fill their queues and block
    children = {child.pid for child in psutil.Process().children(recursive=True)}
    workers[name], seen = sorted(children - seen), children
print(json.dumps(workers), flush=True)
if sys.argv[1] == "exit":
    os._exit(3)
sys.stdin.read()  # until killed
"""


def _run_trainer(ending: str) -> tuple[dict[str, list[int]], float, dict[str, list[int]]]:
    """Run the trainer, capturing its output, until it dies (``exit``: by ``os._exit``; ``kill``: by
    our SIGKILL). Returns its workers by loader, the seconds from its death until its output was
    captured in full, and the workers still alive ``EXIT_S`` after its death."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, ending],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    workers: dict[str, list[int]] = {}
    try:
        assert trainer.stdout is not None
        line = trainer.stdout.readline()
        assert line, f"the trainer ended early: {trainer.communicate(timeout=60)[1].decode()[-3000:]}"
        workers = json.loads(line)
        assert all(len(pids) == 2 for pids in workers.values()), workers
        if ending == "kill":
            trainer.send_signal(signal.SIGKILL)
        trainer.wait(60)
        died = time.monotonic()
        # What subprocess.run(capture_output=True) waits for: every holder of the pipes gone.
        with contextlib.suppress(subprocess.TimeoutExpired):
            trainer.communicate(timeout=EXIT_S)
        took = time.monotonic() - died
        return workers, took, _survivors(workers, died + EXIT_S)
    finally:
        if trainer.poll() is None:
            trainer.kill()
        kill_survivors([pid for pids in workers.values() for pid in pids])
        trainer.communicate(timeout=60)


def _survivors(workers: dict[str, list[int]], deadline: float) -> dict[str, list[int]]:
    """The workers, by loader, still alive at ``deadline`` (``time.monotonic()``)."""
    while True:
        left = {name: [pid for pid in pids if alive(pid)] for name, pids in workers.items()}
        left = {name: pids for name, pids in left.items() if pids}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)  # polling processes that are no longer ours: no event to wait on


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["exit", "kill"])
def test_workers_exit_with_their_trainer_and_release_its_stdout(ending: str) -> None:
    """A trainer that calls ``os._exit`` or is SIGKILLed while the workers of every kind that starts
    processes are blocked writing batches bigger than a pipe's buffer: each worker exits within
    seconds, and capturing the trainer's output (``subprocess.run(capture_output=True)``) returns."""
    workers, took, survivors = _run_trainer(ending)
    assert not survivors, f"workers alive {EXIT_S:g} s after the trainer's death, by loader: {survivors}"
    assert took < EXIT_S, f"the trainer's output stayed open {took:.1f} s after its death"
    assert set(workers) == {"torch", "torch+thread", "ram queue", "sharded", "torch, started on a thread"}
