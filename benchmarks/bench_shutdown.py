"""How long errors, ``close()`` and Ctrl-C take when a producer is stuck, per component.

    python benchmarks/bench_shutdown.py                          # this checkout
    python benchmarks/bench_shutdown.py --against /tmp/lf_before # and another one, side by side
    python benchmarks/bench_shutdown.py --only sigint            # the rows whose name contains it

``--against DIR`` imports ``loaderfactory`` from ``DIR`` (a checkout, or a folder holding a copy of
the package) for the first column. Every row runs in a fresh subprocess and prints seconds:

- ``stall``: a source that never delivers, ``timeout`` 0.5 s: how long after the timeout the
  ``StallError`` reaches the loop (worker start-up included).
- ``error``: item 0 raises while the other workers are busy with 3 s items: how long after the
  raise the exception reaches the loop.
- ``close``: ``close()`` while every producer is stuck in its source.
- ``idle close``: ``close()`` of a loader whose process workers are idle, the slowest of 30.
- ``sigint``: Ctrl-C to a script whose loop waits on a stuck producer, until the process is gone.
- ``held``: worker processes still alive 1 s after a worker error and ``close()``, with the
  exception still held (a count, not seconds).
- ``fd limit``: the error when held batches use up the open-file limit (the start of its message).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

HANG_S = 60.0
"""A stuck producer: longer than any row takes."""
TIMEOUT_S = 0.5
SLOW_S = 3.0
"""How long the busy workers of the ``error`` rows take per item."""


class Boom(Exception):
    """Raised by the failing item; carries ``time.time()`` of the raise."""


class Hangs:
    """Items from ``ok`` on hang: a stuck dataset."""

    def __init__(self, ok: int = 0) -> None:
        self.ok = ok

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> Any:
        if index >= self.ok:
            time.sleep(HANG_S)
        return {"x": torch.zeros(4)}


class FailsAt:
    """Item ``bad`` raises at once; every other item takes ``SLOW_S``."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> Any:
        if index == self.bad:
            raise Boom(time.time())
        time.sleep(SLOW_S)
        return {"x": torch.zeros(4)}


class Quick:
    def __len__(self) -> int:
        return 4000

    def __getitem__(self, index: int) -> Any:
        return {"x": torch.full((4,), index)}


class ManyTensors:
    """Items of 16 small tensors: a held batch keeps 16 file descriptors open."""

    def __len__(self) -> int:
        return 4000

    def __getitem__(self, index: int) -> Any:
        return {f"k{key}": torch.full((2,), index) for key in range(16)}


def hanging(ok: int = 0) -> Iterator[int]:
    yield from range(ok)
    time.sleep(HANG_S)
    yield ok


# -- components ------------------------------------------------------------------------------------


def thread_buffer(dataset: Any = None, **kw: Any) -> Any:
    from loaderfactory import ThreadBuffer

    return ThreadBuffer(hanging(dataset.ok if dataset else 0), **kw)


def thread_loader(dataset: Any = None, **kw: Any) -> Any:
    from loaderfactory import ThreadDataLoader

    return ThreadDataLoader(dataset or Hangs(), batch_size=1, **kw)


def queue(worker_type: str, dataset: Any = None, **kw: Any) -> Any:
    from loaderfactory import QueueDataset

    return QueueDataset(
        dataset or Hangs(),
        num_workers=2,
        worker_type=worker_type,  # type: ignore[arg-type]  # "thread" or "process"
        capacity=8,
        mode="always",
        wait_fill=False,
        seed=0,
        **kw,
    )


def sharded(worker_type: str, dataset: Any = None, **kw: Any) -> Any:
    from loaderfactory import ShardedDataLoader

    return ShardedDataLoader(dataset or Hangs(), batch_size=1, num_workers=2, worker_type=worker_type, **kw)  # type: ignore[arg-type]  # "thread" or "process"


def stream(dataset: Any = None, **kw: Any) -> Any:
    from loaderfactory import StreamWrapper

    return StreamWrapper(lambda: hanging(dataset.ok if dataset else 0), buffer_size=1, **kw)


def pipeline(dataset: Any = None) -> Any:
    """``loader: sharded`` (2 process workers) and ``prefetch: thread``, as ``build_loader`` makes it."""
    from loaderfactory import Loader, ThreadBuffer

    loader = sharded("process", dataset=dataset)
    return Loader({"loader": loader, "prefetch": ThreadBuffer(loader)})


COMPONENTS: dict[str, Callable[..., Any]] = {
    "thread buffer": thread_buffer,
    "ThreadDataLoader": thread_loader,
    "queue thread": lambda **kw: queue("thread", **kw),
    "queue process": lambda **kw: queue("process", **kw),
    "sharded thread": lambda **kw: sharded("thread", **kw),
    "sharded process": lambda **kw: sharded("process", **kw),
    "stream": stream,
}

# -- rows ------------------------------------------------------------------------------------------


def stall(name: str) -> float:
    key = "buffer_timeout" if name == "ThreadDataLoader" else "timeout"
    component = COMPONENTS[name](**{key: TIMEOUT_S})
    started = time.perf_counter()
    try:
        next(iter(component))
    except TimeoutError:
        return time.perf_counter() - started - TIMEOUT_S
    raise AssertionError("no StallError")


def error(name: str) -> float:
    from loaderfactory.components.queue.filler import index_order

    if name.startswith("queue"):
        component = COMPONENTS[name](dataset=FailsAt(next(index_order(64, 0))))
    elif name == "ThreadDataLoader":
        component = thread_loader(FailsAt(0), num_workers=2)
    else:
        component = COMPONENTS[name](dataset=FailsAt(0))
    try:
        for _ in component:
            pass
    except Boom as boom:
        # torch's workers re-raise it with the worker's traceback as its message: the time is last.
        return time.time() - float(str(boom).split()[-1])
    raise AssertionError("no error")


def in_background(fn: Callable[[], Any]) -> None:
    def run() -> None:
        with contextlib.suppress(BaseException):
            fn()

    threading.Thread(target=run, daemon=True).start()


def close(name: str) -> float:
    component = pipeline() if name == "Loader sharded+prefetch" else COMPONENTS[name]()
    if name.startswith("queue"):
        component.start()
    else:
        iterator = iter(component)
        in_background(lambda: next(iterator))
    time.sleep(0.5)  # the producers are stuck in the source by now
    started = time.perf_counter()
    component.close()
    return time.perf_counter() - started


def idle_close(name: str) -> float:
    slowest = 0.0
    for _ in range(30):
        component = COMPONENTS[name](dataset=Quick())
        iterator = iter(component)
        for _ in range(3):
            next(iterator)
        time.sleep(0.05)
        started = time.perf_counter()
        component.close()
        slowest = max(slowest, time.perf_counter() - started)
    return slowest


def held(name: str) -> float:
    import psutil

    component = thread_loader(FailsAt(3), num_workers=2)
    kept: list[BaseException] = []
    try:
        for _ in component:
            pass
    except Boom as boom:
        kept.append(boom)
    component.close()
    time.sleep(1.0)
    children = psutil.Process().children()
    return float(sum(1 for child in children if child.status() != psutil.STATUS_ZOMBIE))


def fd_limit(name: str) -> str:
    held_batches = []
    iterator = iter(sharded("process", dataset=ManyTensors(), timeout=20))
    held_batches.append(next(iterator))  # the workers run under the usual limit
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        for batch in iterator:
            held_batches.append(batch)
    except Exception as err:  # noqa: BLE001 - the row shows what arrives
        return f"{type(err).__name__}: {str(err)[:90]}"
    return "no error"


SIGINT_SCRIPT = """
import signal
import sys
# Python ignores Ctrl-C in a process started with SIGINT ignored (from a background shell job).
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {here!r})
from bench_shutdown import COMPONENTS, Hangs, pipeline
name = {name!r}
# One batch, then stuck (the queue draws from any item it holds: it gets none).
dataset = Hangs(0 if name.startswith("queue") else 1)
component = pipeline(dataset) if name.startswith("Loader") else COMPONENTS[name](dataset=dataset)
iterator = iter(component)  # held to the end, as a training script holds its loop's iterator
if dataset.ok:
    next(iterator)
print("ready", flush=True)
if name.endswith("with"):
    with component:
        for batch in iterator:
            pass
else:
    for batch in iterator:
        pass
"""


def sigint(name: str) -> float:
    code = SIGINT_SCRIPT.format(here=str(Path(__file__).parent), name=name)
    child = subprocess.Popen(  # run from here: `-c` puts the working directory first on sys.path
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=Path(__file__).parent,
    )
    assert child.stdout is not None
    child.stdout.readline()
    time.sleep(1.0)  # inside the loop, waiting on the stuck producer
    child.send_signal(signal.SIGINT)
    started = time.perf_counter()
    try:
        child.wait(60)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return float("inf")
    return time.perf_counter() - started


ERROR_ROWS = ("queue thread", "queue process", "sharded thread", "sharded process", "ThreadDataLoader")
ROWS: list[tuple[str, Callable[[str], Any], str]] = [
    *[("stall", stall, name) for name in COMPONENTS],
    *[("error", error, name) for name in ERROR_ROWS],
    *[("close", close, name) for name in [*COMPONENTS, "Loader sharded+prefetch"]],
    ("idle close", idle_close, "sharded process"),
    ("idle close", idle_close, "queue process"),
    *[
        ("sigint", sigint, name)
        for name in (
            "thread buffer",
            "queue thread",
            "queue process",
            "sharded process",
            "stream",
            "Loader sharded+prefetch",
            "Loader sharded+prefetch, with",
        )
    ],
    ("held", held, "ThreadDataLoader 2 workers"),
    ("fd limit", fd_limit, "sharded process"),
]


def run_row(index: int, against: str | None) -> Any:
    env = dict(os.environ)
    if against:
        env["PYTHONPATH"] = against
    code = [sys.executable, __file__, "--row", str(index)]
    try:
        done = subprocess.run(code, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "timed out"
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else f"failed: {done.stderr.strip().splitlines()[-1:]}"


def show(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--against", help="a folder whose loaderfactory to measure first")
    parser.add_argument("--only", default="", help="rows whose name contains this")
    parser.add_argument("--row", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row is not None:
        kind, fn, name = ROWS[args.row]
        print(json.dumps(fn(name)), flush=True)
        os._exit(0)  # stuck daemon threads and workers are not part of the figure
    columns = ([args.against] if args.against else []) + [None]
    header = "before | now" if args.against else "now"
    print(f"| row | {header} |\n|---|{'---|' * len(columns)}")
    for index, (kind, _, name) in enumerate(ROWS):
        row = f"{kind}: {name}"
        if args.only not in row:
            continue
        values = [show(run_row(index, against)) for against in columns]
        print(f"| {row} | {' | '.join(values)} |", flush=True)


if __name__ == "__main__":
    main()
