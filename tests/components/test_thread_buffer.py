"""ThreadBuffer and ThreadDataLoader: order, errors, stalls, thread lifetime, repeats and len()."""

from __future__ import annotations

import gc
import itertools
import json
import math
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from loaderfactory import StallError, ThreadBuffer, ThreadDataLoader
from loaderfactory.components.data.datasets import SyntheticDataset


def buffer_threads(name: str = "") -> list[threading.Thread]:
    """Live threads started by a ThreadBuffer (optionally only the one called ``name``)."""
    prefix = f"loaderfactory-{name}"
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def wait_for_no_buffer_threads(name: str = "", within: float = 20.0) -> list[threading.Thread]:
    """Poll (bounded) until no buffer thread is alive; returns the ones still alive at the deadline."""
    deadline = time.monotonic() + within
    while buffer_threads(name) and time.monotonic() < deadline:
        time.sleep(0.01)
    return buffer_threads(name)


class Boom(Exception):
    """A source's own exception type, so tests can tell it from anything the buffer raises."""


def failing_source(k: int, raised: list[BaseException]) -> Iterator[int]:
    """Yields 0..k-1, then raises Boom (kept in ``raised`` to check identity)."""
    yield from range(k)
    error = Boom(f"source failed after {k} items")
    raised.append(error)
    raise error


@pytest.mark.parametrize("buffer_size", [1, 3, 64])
def test_yields_every_item_in_order(buffer_size: int) -> None:
    """Items come out exactly as the source yields them, whatever the buffer size."""
    assert list(ThreadBuffer(range(100), buffer_size=buffer_size)) == list(range(100))


def test_empty_source_yields_nothing() -> None:
    """An empty source ends the pass at once."""
    assert list(ThreadBuffer([], buffer_size=2)) == []


@pytest.mark.parametrize("k", [0, 1, 7])
@pytest.mark.parametrize("buffer_size", [1, 4])
def test_source_exception_arrives_after_the_items_before_it(k: int, buffer_size: int) -> None:
    """The source's exception is re-raised in the consumer, same object and type, after its k items."""
    raised: list[BaseException] = []
    received = []
    with pytest.raises(Boom, match=f"after {k} items") as info:
        for item in ThreadBuffer(failing_source(k, raised), buffer_size=buffer_size):
            received.append(item)
    assert received == list(range(k))
    assert info.value is raised[0]
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "failing_source" in frames, frames
    assert wait_for_no_buffer_threads() == []


def test_after_the_exception_the_pass_is_over() -> None:
    """Once the source's exception has been raised, the same iterator is exhausted."""
    it = iter(ThreadBuffer(failing_source(2, []), buffer_size=2))
    assert [next(it), next(it)] == [0, 1]
    with pytest.raises(Boom):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_stall_raises_a_timeout_error_naming_the_component() -> None:
    """A source silent for longer than ``timeout`` raises StallError (a TimeoutError) promptly."""
    release = threading.Event()

    def stuck() -> Iterator[int]:
        yield 0
        release.wait(60)  # stuck until the test lets go
        yield 1

    it = iter(ThreadBuffer(stuck(), timeout=0.1, name="my-stage"))
    assert next(it) == 0
    with pytest.raises(StallError, match=r"my-stage: no batch from its source for 0\.1 s") as info:
        next(it)
    assert isinstance(info.value, TimeoutError)
    # The stall error did not wait for the stuck source: it is still blocked right now.
    assert buffer_threads("my-stage")
    release.set()
    assert wait_for_no_buffer_threads("my-stage") == []
    with pytest.raises(StopIteration):
        next(it)


def test_slow_but_steady_source_does_not_stall() -> None:
    """A timeout only fires on a silence longer than it, not on a long pass."""

    def steady() -> Iterator[int]:
        for i in range(5):
            time.sleep(0.01)
            yield i

    assert list(ThreadBuffer(steady(), timeout=30)) == list(range(5))


def test_infinite_timeout_waits_forever() -> None:
    """``timeout=inf`` (YAML ``.inf``) means no deadline instead of overflowing the wait."""

    def slow() -> Iterator[int]:
        for i in range(3):
            time.sleep(0.02)
            yield i

    assert list(ThreadBuffer(slow(), timeout=math.inf)) == [0, 1, 2]


def test_early_break_leaves_no_thread() -> None:
    """Breaking out of the loop stops and joins the producer before the next statement runs."""
    for item in ThreadBuffer(itertools.count(), buffer_size=2, name="breaker"):
        if item == 3:
            break
    assert buffer_threads("breaker") == []


def test_close_stops_the_thread_and_ends_the_pass() -> None:
    """``close()`` joins the producer; the open iterator then ends; a second close is a no-op."""
    buffer = ThreadBuffer(itertools.count(), buffer_size=2, name="closer")
    it = iter(buffer)
    assert next(it) == 0
    assert buffer_threads("closer")
    buffer.close()
    assert buffer_threads("closer") == []
    with pytest.raises(StopIteration):
        next(it)
    buffer.close()


def test_with_block_stops_the_thread() -> None:
    """Leaving a ``with`` block stops the producer even while an iterator is still referenced."""
    with ThreadBuffer(itertools.count(), name="ctx") as buffer:
        it = iter(buffer)
        assert next(it) == 0
        assert buffer_threads("ctx")
    assert buffer_threads("ctx") == []
    with pytest.raises(StopIteration):
        next(it)


def test_garbage_collection_stops_the_thread() -> None:
    """Dropping the last reference to an unfinished iterator stops its producer."""
    it = iter(ThreadBuffer(itertools.count(), name="dropped"))
    assert next(it) == 0
    assert buffer_threads("dropped")
    del it
    gc.collect()
    assert buffer_threads("dropped") == []


def test_abandoned_buffer_with_blocked_producer_is_collected() -> None:
    """A buffer whose producer is blocked on a full channel is stopped when buffer and iterator go."""
    buffer = ThreadBuffer(itertools.count(), buffer_size=1, name="full")
    it = iter(buffer)
    next(it)
    del buffer, it
    gc.collect()
    assert wait_for_no_buffer_threads("full") == []


def test_reiterating_starts_a_fresh_pass() -> None:
    """Each ``iter()`` is a new pass over the source; starting one ends the previous one."""
    buffer = ThreadBuffer([1, 2, 3, 4], buffer_size=2)
    assert list(buffer) == [1, 2, 3, 4]
    assert list(buffer) == [1, 2, 3, 4]
    first = iter(buffer)
    assert next(first) == 1
    second = iter(buffer)
    with pytest.raises(StopIteration):
        next(first)
    assert list(second) == [1, 2, 3, 4]
    assert wait_for_no_buffer_threads() == []


@pytest.mark.parametrize("repeats", [1, 2, 5])
def test_repeats_echo_each_item_and_len_counts_them(repeats: int) -> None:
    """``repeats=r`` yields each item r times in a row, and ``len()`` is what a pass yields."""
    buffer = ThreadBuffer([10, 20, 30], repeats=repeats)
    out = list(buffer)
    assert out == [x for x in (10, 20, 30) for _ in range(repeats)]
    assert len(buffer) == len(out) == 3 * repeats


def test_len_of_an_unsized_source_is_a_type_error() -> None:
    """A generator has no length, so neither has the buffer over it."""
    with pytest.raises(TypeError):
        len(ThreadBuffer(iter(range(3))))


def test_echo_copies_isolate_in_place_edits() -> None:
    """Editing one echo in place leaves the other echoes of the same batch untouched."""
    source = [{"x": torch.zeros(3)}, {"x": torch.ones(3)}]
    seen = []
    for batch in ThreadBuffer(source, repeats=3):
        seen.append(batch["x"].clone())
        batch["x"].add_(100)
    expected = [torch.zeros(3)] * 3 + [torch.ones(3)] * 3
    assert all(torch.equal(a, b) for a, b in zip(seen, expected, strict=True))


def test_echoes_share_storage_when_copies_are_off() -> None:
    """With ``copy_echoes=False`` every echo is the very same object (no copy cost)."""
    source = [torch.zeros(2)]
    out = list(ThreadBuffer(source, repeats=3, copy_echoes=False))
    assert all(o is source[0] for o in out)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"buffer_size": 0}, "buffer_size must be >= 1"),
        ({"repeats": 0}, "repeats must be >= 1"),
        ({"timeout": 0}, "timeout must be > 0"),
        ({"timeout": -1.0}, "timeout must be > 0"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, float], match: str) -> None:
    """Direct Python use gets a ValueError for nonsense arguments, before any thread starts."""
    with pytest.raises(ValueError, match=match):
        ThreadBuffer([1], **kwargs)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(st.integers(), max_size=30),
    buffer_size=st.integers(1, 8),
    repeats=st.integers(1, 3),
)
def test_yields_exactly_the_source_repeated(items: list[int], buffer_size: int, repeats: int) -> None:
    """For any source, buffer size and repeats, a pass is the source with each item repeated."""
    buffer = ThreadBuffer(items, buffer_size=buffer_size, repeats=repeats)
    out = list(buffer)
    assert out == [x for x in items for _ in range(repeats)]
    assert len(buffer) == len(out)


@settings(max_examples=25, deadline=None)
@given(items=st.lists(st.integers(), min_size=1, max_size=20), data=st.data())
def test_break_anywhere_leaves_no_thread(items: list[int], data: st.DataObject) -> None:
    """Stopping after any number of items yields a prefix of the source and leaves no thread."""
    stop = data.draw(st.integers(0, len(items) - 1))
    got = []
    for item in ThreadBuffer(items, buffer_size=2, name="anywhere"):
        got.append(item)
        if len(got) > stop:
            break
    assert got == items[: stop + 1]
    assert buffer_threads("anywhere") == []


# --- ThreadDataLoader ---------------------------------------------------------------------------


def test_thread_data_loader_is_a_data_loader() -> None:
    """Code that expects a torch DataLoader accepts a ThreadDataLoader."""
    loader = ThreadDataLoader(SyntheticDataset(8), batch_size=4)
    assert isinstance(loader, DataLoader)
    assert loader.batch_size == 4


@pytest.mark.parametrize(
    ("length", "batch_size", "drop_last", "repeats"), [(10, 3, False, 1), (10, 3, True, 2), (8, 4, False, 3)]
)
def test_thread_data_loader_len_counts_repeats(
    length: int, batch_size: int, drop_last: bool, repeats: int
) -> None:
    """``len()`` is the number of batches an epoch yields, echoes included."""
    loader = ThreadDataLoader(
        SyntheticDataset(length), batch_size=batch_size, drop_last=drop_last, repeats=repeats, buffer_size=2
    )
    batches = list(loader)
    assert len(loader) == len(batches)
    plain = list(DataLoader(SyntheticDataset(length), batch_size=batch_size, drop_last=drop_last))
    expected = [b["index"].tolist() for b in plain for _ in range(repeats)]
    assert [b["index"].tolist() for b in batches] == expected


def test_thread_data_loader_close_and_with_stop_the_thread() -> None:
    """``close()`` and leaving a ``with`` stop the prefetch thread of an unfinished epoch."""
    with ThreadDataLoader(SyntheticDataset(64), batch_size=2) as loader:
        it = iter(loader)
        next(it)
        assert buffer_threads("ThreadDataLoader")
    assert buffer_threads("ThreadDataLoader") == []
    it = iter(loader)
    next(it)
    loader.close()
    loader.close()
    assert buffer_threads("ThreadDataLoader") == []


def test_thread_data_loader_forwards_dataset_errors() -> None:
    """An error in the dataset reaches the training loop with its own type."""

    class Broken(SyntheticDataset):
        def __getitem__(self, index: int) -> dict[str, object]:
            if index == 5:
                raise KeyError("item 5 is corrupt")
            return super().__getitem__(index)

    got = []
    with pytest.raises(KeyError, match="item 5 is corrupt"):
        for batch in ThreadDataLoader(Broken(10), batch_size=2, buffer_size=2):
            got.append(batch["index"].tolist())
    assert got == [[0, 1], [2, 3]]


def test_thread_data_loader_stall_timeout() -> None:
    """``buffer_timeout`` turns a dataset that hangs into a StallError naming ThreadDataLoader."""
    release = threading.Event()

    class Hangs(SyntheticDataset):
        def __getitem__(self, index: int) -> dict[str, object]:
            if index == 1:
                release.wait(60)
            return super().__getitem__(index)

    loader = ThreadDataLoader(Hangs(4), batch_size=1, buffer_timeout=0.1)
    it = iter(loader)
    next(it)
    with pytest.raises(StallError, match="ThreadDataLoader"):
        next(it)
    release.set()
    assert wait_for_no_buffer_threads("ThreadDataLoader") == []


# --- resume -------------------------------------------------------------------------------------


def _take_and_save(
    buffer: ThreadBuffer[int], state: dict[str, Any] | None, count: int
) -> tuple[list[int], dict[str, Any]]:
    """Restore ``state`` (if any), take ``count`` items of a pass, return them and the state then."""
    if state is not None:
        buffer.load_state_dict(state)
    it = iter(buffer)
    got = [next(it) for _ in range(count)]
    saved = json.loads(json.dumps(buffer.state_dict()))
    buffer.close()
    return got, saved


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(length=st.integers(1, 6), repeats=st.integers(1, 3), data=st.data())
def test_resuming_twice_yields_exactly_the_rest(length: int, repeats: int, data: st.DataObject) -> None:
    """Saved, restored, advanced (mid-echo or not) and saved again, a buffer still resumes exactly."""
    reference = [x for x in range(length) for _ in range(repeats)]
    first = data.draw(st.integers(0, len(reference)), label="first")
    second = data.draw(st.integers(0, len(reference) - first), label="second")
    got, state = _take_and_save(ThreadBuffer(range(length), buffer_size=2, repeats=repeats), None, first)
    more, state = _take_and_save(ThreadBuffer(range(length), buffer_size=2, repeats=repeats), state, second)
    restored = ThreadBuffer(range(length), buffer_size=2, repeats=repeats)
    restored.load_state_dict(state)
    assert got + more + list(restored) == reference
    assert list(restored) == reference  # the pass after the resumed one is whole


def test_resuming_twice_inside_the_echoes_of_one_item() -> None:
    """Two resumes inside the three echoes of one item yield its last echo, then the next items."""
    _, state = _take_and_save(ThreadBuffer(range(3), repeats=3), None, 4)  # 0 0 0 1
    assert state["echoes_done"] == 1
    got, state = _take_and_save(ThreadBuffer(range(3), repeats=3), state, 1)  # 1
    assert got == [1] and state["echoes_done"] == 2
    restored = ThreadBuffer(range(3), repeats=3)
    restored.load_state_dict(state)
    assert list(restored) == [1, 2, 2, 2]
