"""Fault injection: one table of faults, run against every component, each ending in bounded time.

Every component (and a ``Loader`` stacking process workers under a prefetch thread) meets every
fault that applies to it: an error at item ``k``, a producer stuck with and without a ``timeout``,
a killed worker process, an early ``break``, garbage collection without ``close()``, Ctrl-C in a
subprocess, and a corrupted state. The autouse leak check (``conftest.py``) fails any case that
leaves a thread, child process or shared-memory segment behind. The bounds are the README's.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from process_checks import alive, allowance

from loaderfactory import (
    Loader,
    QueueDataset,
    ShardedDataLoader,
    StreamWrapper,
    ThreadBuffer,
    ThreadDataLoader,
)
from loaderfactory.components.queue.filler import index_order
from loaderfactory.components.torch_loader import ResumableDataLoader
from loaderfactory.components.workers.lifecycle import KILL_GRACE_S, STOP_GRACE_S, close_component
from loaderfactory.errors import ResumeError, StallError, WorkerError

HANG_S = 60.0
"""A stuck producer: it returns only when its test releases it (worker processes never do)."""
TIMEOUT_S = 0.3
K = 3
"""The item the fault hits: items before it load at once."""
LENGTH = 64
SEED = 0
ERROR_BOUND_S = STOP_GRACE_S
"""An error reaches the loop before any grace could have passed: nothing waited for cleanup."""
CLOSE_BOUND_S = STOP_GRACE_S + 2 * KILL_GRACE_S + 0.5
"""``close()`` with stuck producers: one grace for all, SIGTERM, SIGKILL, and slack."""
EXIT_BOUND_S = 2.5
"""The README's "about 2 s" from Ctrl-C to the process being gone (measured under 0.6 s idle); a busy
machine gets half the child's own start-up time on top."""
DETECT_BOUND_S = 1.0
"""A killed worker is reported within 1 s (torch's own status check runs every 5 s)."""


class Injected(Exception):
    """The injected fault; its message ends with ``time.time()`` of the raise."""


class Faulty:
    """Items ``{"x": tensor([i])}``; the fault hits the item loaded at position ``fail_at``.

    Positions count loads in ``order`` (the dataset order when ``None``). The item at ``fail_at``
    raises :class:`Injected`; items from ``hang_from`` on hang until ``release`` is set, which
    never happens in a worker process (a copy of the event): those are stopped. A hanging item first
    leaves a file in ``entered`` (when given), so a test sees a producer stuck, in a thread or a process.
    """

    def __init__(
        self,
        release: threading.Event,
        fail_at: int | None = None,
        hang_from: int | None = None,
        order: list[int] | None = None,
        delay_s: float = 0.0,
        entered: Path | None = None,
    ) -> None:
        self.release = release
        self.fail_at = fail_at
        self.hang_from = hang_from
        self.position = {index: position for position, index in enumerate(order)} if order else None
        self.delay_s = delay_s
        self.entered = entered

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        position = self.position[index] if self.position is not None else index
        if self.delay_s:
            time.sleep(self.delay_s)
        if position == self.fail_at:
            raise Injected(f"injected at item {index} {time.time()!r}")
        if self.hang_from is not None and position >= self.hang_from:
            if self.entered is not None:
                with contextlib.suppress(OSError):  # the test may be over: hang all the same
                    (self.entered / f"{os.getpid()}-{threading.get_ident()}-{index}").touch()
            self.release.wait(HANG_S)
        return {"x": torch.tensor([index])}


class Items:
    """The dataset's items in order, as a re-iterable source for the buffering stages."""

    def __init__(self, dataset: Faulty) -> None:
        self.dataset = dataset

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return (self.dataset[index] for index in range(len(self.dataset)))


Build = Callable[[Faulty, "float | None"], Any]


@dataclass(frozen=True)
class Component:
    """A component under test and what to expect of it."""

    name: str
    build: Build
    processes: bool = False
    """It has worker processes: a worker can be killed; a stuck one is terminated, not abandoned."""
    ordered: bool = True
    """It yields the items in order: exactly ``k`` batches arrive before the fault at item ``k``."""
    stateful: bool = True
    order: list[int] | None = None
    """The order it loads items in, when not the dataset's."""
    stall_error: type[BaseException] = StallError
    abandons_threads: bool = False
    """A producer thread stuck in the dataset is left as a daemon at close(), with a warning."""
    build_persistent: Build | None = None
    """The component with ``persistent_workers=True``, where it has epochs and keeps its workers."""

    def __str__(self) -> str:
        return self.name


def _queue(worker_type: str) -> Build:
    def build(data: Faulty, timeout: float | None) -> QueueDataset:
        return QueueDataset(
            data,
            epoch_size=10**6,  # never ends on its own: a fault must end it
            num_workers=2,
            worker_type=worker_type,  # type: ignore[arg-type]  # "thread" or "process"
            capacity=4,
            mode="always",
            wait_fill=False,
            seed=SEED,
            timeout=timeout,
        )

    return build


def _sharded(worker_type: str, persistent: bool = False) -> Build:
    def build(data: Faulty, timeout: float | None) -> ShardedDataLoader:
        return ShardedDataLoader(
            data,
            batch_size=1,
            num_workers=2,
            worker_type=worker_type,  # type: ignore[arg-type]  # "thread" or "process"
            timeout=timeout,
            seed=SEED,
            persistent_workers=persistent,
        )

    return build


def _thread_loader(num_workers: int, persistent: bool = False) -> Build:
    def build(data: Faulty, timeout: float | None) -> ThreadDataLoader:
        return ThreadDataLoader(
            data,
            batch_size=1,
            buffer_size=2,
            buffer_timeout=timeout,
            num_workers=num_workers,
            persistent_workers=persistent,
        )

    return build


def _torch(persistent: bool = False) -> Build:
    def build(data: Faulty, timeout: float | None) -> ResumableDataLoader:
        return ResumableDataLoader(
            data, batch_size=1, seed=SEED, num_workers=2, timeout=timeout or 0, persistent_workers=persistent
        )

    return build


def _pipeline(data: Faulty, timeout: float | None) -> Loader:
    """``loader: sharded`` with process workers under ``prefetch: thread``."""
    loader = ShardedDataLoader(data, batch_size=1, num_workers=2, timeout=timeout, seed=SEED)
    return Loader({"loader": loader, "prefetch": ThreadBuffer(loader, buffer_size=2)})


QUEUE_ORDER = list(itertools.islice(index_order(LENGTH, SEED), LENGTH))
"""The queue loads one seeded permutation per pass."""

COMPONENTS = [
    Component(
        "ThreadBuffer",
        lambda data, timeout: ThreadBuffer(Items(data), buffer_size=2, timeout=timeout),
        abandons_threads=True,
    ),
    Component("ThreadDataLoader", _thread_loader(0), stateful=False, abandons_threads=True),
    Component(
        "ThreadDataLoader+workers",
        _thread_loader(2),
        processes=True,
        stateful=False,
        build_persistent=_thread_loader(2, persistent=True),
    ),
    Component(
        "QueueDataset thread",
        _queue("thread"),
        ordered=False,
        order=QUEUE_ORDER,
        abandons_threads=True,
    ),
    Component(
        "QueueDataset process",
        _queue("process"),
        processes=True,
        ordered=False,
        order=QUEUE_ORDER,
    ),
    Component("ShardedDataLoader thread", _sharded("thread"), abandons_threads=True),
    Component(
        "ShardedDataLoader process",
        _sharded("process"),
        processes=True,
        build_persistent=_sharded("process", persistent=True),
    ),
    Component(
        "StreamWrapper",
        lambda data, timeout: StreamWrapper(
            lambda: Items(data), buffer_size=2, timeout=timeout, name="faulty"
        ),
        abandons_threads=True,
    ),
    Component(
        "torch kind",
        _torch(),
        processes=True,
        stall_error=RuntimeError,  # torch's own "DataLoader timed out"
        build_persistent=_torch(persistent=True),
    ),
    Component("Loader sharded+prefetch", _pipeline, processes=True),
]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Lets stuck producer threads go when the test ends, before the leak check looks for them."""
    event = threading.Event()
    yield event
    event.set()


def raised_at(error: BaseException) -> float:
    """When the worker raised the injected fault (torch re-raises it with the traceback first)."""
    return float(str(error).split()[-1])


def in_background(fn: Callable[[], Any]) -> threading.Thread:
    def run() -> None:
        with contextlib.suppress(BaseException):
            fn()

    thread = threading.Thread(target=run, name="fault-injection-consumer", daemon=True)
    thread.start()
    return thread


def new_children(before: set[int]) -> list[int]:
    return sorted(p.pid for p in psutil.Process().children() if p.pid not in before)


# -- the faults ----------------------------------------------------------------------------------


def error_at_item_k(component: Component, release: threading.Event) -> None:
    """The item's own exception reaches the loop after the items before it, before any cleanup waits."""
    started = time.time()
    made = component.build(Faulty(release, fail_at=K, hang_from=K + 1, order=component.order), None)
    got, startup = 0, 0.0
    with pytest.raises(Injected, match="injected at item") as info:
        for _ in made:
            got += 1
            startup = startup or time.time() - started
    assert time.time() - raised_at(info.value) < ERROR_BOUND_S + allowance(startup)
    if component.ordered:
        assert got == K
    release.set()
    close_component(made)


def stuck_with_timeout(component: Component, release: threading.Event) -> None:
    """A producer stuck in the dataset raises the stall error right after ``timeout``, not after a join."""
    hang_from = K if component.ordered else 0  # the queue draws from held items while any are held
    # Worker processes may take longer than TIMEOUT_S to start on a loaded machine, which would stall
    # a draw before the hang: components with processes get ten times the timeout (3 s).
    timeout = TIMEOUT_S * (10 if component.processes else 1)
    started = time.monotonic()
    made = component.build(Faulty(release, hang_from=hang_from, order=component.order), timeout)
    iterator = iter(made)
    for _ in range(hang_from):
        next(iterator)
    startup = time.monotonic() - started
    started = time.monotonic()
    with pytest.raises(component.stall_error, match=r"timed out|timeout"):
        next(iterator)
    assert time.monotonic() - started - timeout < ERROR_BOUND_S + allowance(startup)
    release.set()
    close_component(made)


def wait_for_a_file(folder: Path, deadline_s: float = 60.0) -> None:
    """Poll ``folder`` until a file appears in it (a producer entered its hang); fail after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while not any(folder.iterdir()):
        assert time.monotonic() < deadline, f"no producer entered the dataset within {deadline_s} s"
        time.sleep(0.01)  # the next look at the folder, not a synchronisation


def stuck_at_close(component: Component, release: threading.Event) -> None:
    """``close()`` while every producer is stuck returns within one grace, warning of abandoned threads.

    ``startup`` runs until a producer is inside the dataset: it counts starting the worker processes
    (or threads), which a loaded machine slows as much as it slows stopping them."""
    with tempfile.TemporaryDirectory(prefix="fault-entered-") as folder:
        entered = Path(folder)
        started = time.monotonic()
        made = component.build(Faulty(release, hang_from=0, order=component.order, entered=entered), None)
        iterator = iter(made)
        consumer = in_background(lambda: next(iterator))
        wait_for_a_file(entered)
        startup = time.monotonic() - started
        abandoned = (
            pytest.warns(RuntimeWarning, match="left to finish")
            if component.abandons_threads
            else contextlib.nullcontext()
        )
        started = time.monotonic()
        with abandoned:
            close_component(made)
        assert time.monotonic() - started < CLOSE_BOUND_S + allowance(startup)
        consumer.join(CLOSE_BOUND_S + allowance(startup))  # the consumer waiting for a batch is released
        assert not consumer.is_alive()


def killed_worker(component: Component, release: threading.Event) -> None:
    """A worker process killed mid-epoch ends the loop with an error naming it; nothing stays behind."""
    before = {p.pid for p in psutil.Process().children()}
    started = time.monotonic()
    made = component.build(Faulty(release, hang_from=8, order=component.order, delay_s=0.005), None)
    iterator = iter(made)
    next(iterator)
    startup = time.monotonic() - started
    victim = new_children(before)[0]
    started = time.monotonic()
    with pytest.raises(WorkerError, match=rf"pid {victim}\) (was killed by signal SIGKILL|exited)"):
        os.kill(victim, signal.SIGKILL)
        for _ in iterator:
            pass
    assert time.monotonic() - started < DETECT_BOUND_S + allowance(startup)
    close_component(made)


def killed_between_epochs(component: Component, release: threading.Event) -> None:
    """A persistent worker killed between epochs ends the next epoch's loop with an error naming it."""
    assert component.build_persistent is not None
    before = {p.pid for p in psutil.Process().children()}
    started = time.monotonic()
    made = component.build_persistent(Faulty(release), None)
    startup = 0.0
    for _ in made:
        startup = startup or time.monotonic() - started
    victim = new_children(before)[0]
    os.kill(victim, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(WorkerError, match=rf"pid {victim}\) (was killed by signal SIGKILL|exited)"):
        for _ in made:
            pass
    assert time.monotonic() - started < DETECT_BOUND_S + allowance(startup)
    close_component(made)


def early_break(component: Component, release: threading.Event) -> None:
    """Breaking out of the loop stops every thread and process within one grace."""
    started = time.monotonic()
    made = component.build(Faulty(release), None)
    for index, _ in enumerate(made):
        if index == K:
            break
    startup = time.monotonic() - started
    started = time.monotonic()
    gc.collect()
    close_component(made)
    assert time.monotonic() - started < CLOSE_BOUND_S + allowance(startup)


def collected_without_close(component: Component, release: threading.Event) -> None:
    """A component dropped mid-epoch without ``close()`` stops its threads and processes when collected."""
    started = time.monotonic()
    made = component.build(Faulty(release), None)
    iterator = iter(made)
    next(iterator)
    startup = time.monotonic() - started
    del iterator, made
    started = time.monotonic()
    gc.collect()
    assert time.monotonic() - started < CLOSE_BOUND_S + allowance(startup)


CHILD_PATH = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "support")]
"""What a child interpreter puts first on ``sys.path`` to import this module and the helpers it imports."""
SIGINT_CHILD = """
import json, signal, sys, threading
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with Ctrl-C ignored
sys.path[:0] = {path!r}
import psutil
from test_fault_injection import COMPONENTS, Faulty, K
component = next(c for c in COMPONENTS if c.name == {name!r})
made = component.build(Faulty(threading.Event(), hang_from=K, order=component.order), None)
iterator = iter(made)
next(iterator)
print(json.dumps([p.pid for p in psutil.Process().children()]), flush=True)
for batch in iterator:
    pass
"""


def ctrl_c(component: Component, release: threading.Event) -> None:
    """Ctrl-C to a script whose loop waits on a stuck producer: the process is gone within about 2 s."""
    code = SIGINT_CHILD.format(path=CHILD_PATH, name=component.name)
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, child.communicate(timeout=30)[1]
        startup = time.monotonic() - started  # an interpreter importing torch: ~2 s idle, 4 x the exit
        workers = json.loads(line)
        time.sleep(0.5)  # the loop is waiting on the stuck producer now
        child.send_signal(signal.SIGINT)
        started = time.monotonic()
        _, err = child.communicate(timeout=30)
        assert time.monotonic() - started < EXIT_BOUND_S + startup / 2  # no allowance(): see startup
        assert "KeyboardInterrupt" in err
        deadline = time.monotonic() + 5
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in workers if alive(pid)]
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def corrupted_state(component: Component, release: threading.Event) -> None:
    """A corrupted state (fields missing, or of the wrong type) is refused with a ResumeError."""
    made = component.build(Faulty(release), None)
    iterator = iter(made)
    next(iterator)
    state = made.state_dict()
    del iterator
    try:
        for corrupt in ({}, {key: "corrupted" for key in state}):
            with pytest.raises(ResumeError):
                made.load_state_dict(corrupt)
    finally:
        close_component(made)


@dataclass(frozen=True)
class Fault:
    run: Callable[[Component, threading.Event], None]
    applies: Callable[[Component], bool] = lambda component: True


FAULTS = {
    "error at item k": Fault(error_at_item_k),
    "stuck producer, timeout": Fault(stuck_with_timeout),
    "stuck producer, close": Fault(stuck_at_close),
    "killed worker": Fault(killed_worker, lambda component: component.processes),
    "killed between epochs": Fault(
        killed_between_epochs, lambda component: component.build_persistent is not None
    ),
    "early break": Fault(early_break),
    "collected without close": Fault(collected_without_close),
    "Ctrl-C": Fault(ctrl_c),
    "corrupted state": Fault(corrupted_state, lambda component: component.stateful),
}


@pytest.mark.parametrize(
    ("fault", "component"),
    [
        pytest.param(name, c, marks=[pytest.mark.slow] if fault.run is ctrl_c else [])  # an interpreter each
        for name, fault in FAULTS.items()
        for c in COMPONENTS
        if fault.applies(c)
    ],
    ids=str,
)
def test_every_fault_in_every_component_ends_in_bounded_time(
    fault: str, component: Component, release: threading.Event
) -> None:
    """Each fault of the table, in each component it applies to, ends as its docstring says."""
    FAULTS[fault].run(component, release)


EXIT_CHILD = """
import faulthandler, sys, threading, torch
faulthandler.dump_traceback_later({dump_after}, exit=True)  # a hang at exit shows where it hangs
sys.path[:0] = {path!r}
from test_fault_injection import COMPONENTS, Faulty

class Busy(Faulty):
    def __getitem__(self, index):
        return {{"x": torch.ones(64, 64) @ torch.ones(64, 64)}}  # producers inside torch's native code

component = next(c for c in COMPONENTS if c.name == {name!r})
iterator = iter(component.build(Busy(threading.Event()), None))
for _ in range(3):
    next(iterator)
"""
EXIT_RUNS = 20
"""Before the fix about one run in three aborted, more with ThreadBuffer and StreamWrapper: 20 runs
(two per component) miss that with odds (2/3)**20, about 1 in 3000; each run imports torch afresh."""
EXIT_DUMP_S = 200
"""A run still going after this many seconds prints every thread's stack and exits (a run takes about
7 s on a busy 2-core machine, and once took over 120 s while another test suite and a benchmark ran)."""


@pytest.mark.slow
@pytest.mark.timeout(600)  # 50 interpreters importing torch: about 2 CPU-seconds each
def test_interpreter_exit_with_live_iterators_never_aborts() -> None:
    """A script that ends with an iterator still running exits with 0, every component, every run."""
    names = [COMPONENTS[run % len(COMPONENTS)].name for run in range(EXIT_RUNS)]

    def run(name: str) -> tuple[str, int, str]:
        code = EXIT_CHILD.format(path=CHILD_PATH, name=name, dump_after=EXIT_DUMP_S)
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=EXIT_DUMP_S + 60,
            check=False,
        )
        return name, done.returncode, done.stderr

    with ThreadPoolExecutor(max_workers=4) as pool:  # a run is mostly importing torch: 4 share 2 cores
        results = list(pool.map(run, names))
    failed = [
        (name, code, err[-3000:]) for name, code, err in results if code != 0 or "terminate called" in err
    ]
    assert not failed, failed


FD_CHILD = """
import resource, sys, torch
from loaderfactory import ShardedDataLoader

class ManyTensors:
    def __len__(self):
        return 4000

    def __getitem__(self, index):
        return {f"k{key}": torch.full((2,), index) for key in range(16)}  # 16 descriptors a batch

iterator = iter(ShardedDataLoader(ManyTensors(), batch_size=2, num_workers=2, timeout=60))
held = [next(iterator)]  # the workers started under the usual limit
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
try:
    for batch in iterator:
        held.append(batch)
except Exception as error:
    print(type(error).__name__, error)
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's file-descriptor hand-over")
def test_running_out_of_file_descriptors_says_what_to_do() -> None:
    """Holding batches up to the open-file limit raises a WorkerError that says what to do."""
    done = subprocess.run(
        [sys.executable, "-c", FD_CHILD], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stdout.startswith("WorkerError"), done.stdout + done.stderr
    assert "ran out of file descriptors" in done.stdout
    assert "ulimit -n" in done.stdout and "set_sharing_strategy('file_system')" in done.stdout


def test_waiting_for_processes_that_have_exited_returns_at_once() -> None:
    """The parallel grace returns as soon as the last worker is gone, never sleeping it out on nothing."""
    import multiprocessing

    from loaderfactory.components.workers.exits import wait_for_exit

    process = multiprocessing.get_context("fork").Process(target=time.sleep, args=(0.2,))
    process.start()
    started = time.monotonic()
    assert wait_for_exit([process], time.monotonic() + 30) == []
    assert wait_for_exit([process], time.monotonic() + 30) == []  # gone already: nothing to wait on
    assert time.monotonic() - started < 10


def _take_and_die(lock: Any) -> None:
    lock.acquire()
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_killed_holding_the_stop_signal_does_not_hang_the_shutdown() -> None:
    """A process killed while it held the lock of torch's done event (workers take it to read the
    event) leaves it taken; stopping the workers frees it instead of waiting forever."""
    import multiprocessing

    from loaderfactory.components.workers.exits import stop_workers
    from loaderfactory.components.workers.torch_internals import unregister_pids

    loader = torch.utils.data.DataLoader(torch.arange(8), batch_size=2, num_workers=1)
    iterator = iter(loader)
    next(iterator)
    unregister_pids(iterator)  # torch's SIGCHLD handler would raise here for the worker killed below
    lock = iterator._workers_done_event._cond._lock  # type: ignore[attr-defined]
    holder = multiprocessing.get_context("fork").Process(target=_take_and_die, args=(lock,))
    holder.start()
    holder.join(30)
    assert holder.exitcode == -signal.SIGKILL and not lock.acquire(timeout=0.1)  # taken for good
    worker = iterator._workers[0]  # type: ignore[attr-defined]
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(30)
    stopping = threading.Thread(target=stop_workers, args=(iterator, 0.5, 0.5), daemon=True)
    stopping.start()
    stopping.join(20)
    assert not stopping.is_alive(), "stopping the workers hung on the lock the dead process held"
