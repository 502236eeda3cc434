"""StreamWrapper: epochs over a restartable stream, buffering, failures, profile, lifecycle."""

from __future__ import annotations

import gc
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loaderfactory
from loaderfactory.components.stream.parts import EmptyStreamError
from loaderfactory.components.stream.wrapper import StreamWrapper
from loaderfactory.errors import StallError


def _threads(name: str = "stream") -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"loaderfactory-{name}"]


def _wait_for(condition: Any, seconds: float = 20.0) -> bool:  # returns as soon as it holds
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class _Sized:
    """A stream factory with a length, like the builder's."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __call__(self) -> Iterator[int]:
        return iter(range(self.length))

    def __len__(self) -> int:
        return self.length


@settings(max_examples=40, deadline=None)
@given(length=st.integers(1, 7), epoch_size=st.integers(1, 10), buffer_size=st.sampled_from([0, 1, 3]))
def test_fixed_epochs_cut_across_stream_ends(length: int, epoch_size: int, buffer_size: int) -> None:
    """Over 5 epochs every epoch has exactly epoch_size batches and the stream repeats without loss."""
    with StreamWrapper(_Sized(length), buffer_size=buffer_size, epoch_size=epoch_size) as stream:
        epochs = [list(stream) for _ in range(5)]
    assert [len(e) for e in epochs] == [epoch_size] * 5
    flat = [b for e in epochs for b in e]
    assert flat == [i % length for i in range(5 * epoch_size)]
    assert len(stream) == epoch_size and stream.epoch == 5


@pytest.mark.parametrize("buffer_size", [0, 2])
def test_one_pass_is_one_epoch(buffer_size: int) -> None:
    """With epoch_size <= 0 each epoch is one whole pass and len() is the pass length."""
    with StreamWrapper(_Sized(4), buffer_size=buffer_size) as stream:
        assert len(stream) == 4
        assert [list(stream) for _ in range(3)] == [[0, 1, 2, 3]] * 3


def test_len_of_an_unsized_stream_says_what_to_set() -> None:
    """len() of a one-pass epoch over a stream of unknown length asks for epoch_size."""
    with pytest.raises(TypeError, match="no known length; set epoch_size"):
        len(StreamWrapper(lambda: iter(range(3))))


@pytest.mark.parametrize("epoch_size", [-1, 3, 7])
def test_buffered_and_unbuffered_yield_the_same(epoch_size: int) -> None:
    """A buffered stream yields exactly the sequence and epochs of an unbuffered one."""
    import random

    passes = iter(range(100))

    def make() -> Any:
        rng = random.Random(next(passes))
        return [rng.random() for _ in range(rng.randint(1, 6))]

    def run(buffer_size: int) -> list[list[float]]:
        nonlocal passes
        passes = iter(range(100))
        with StreamWrapper(make, buffer_size=buffer_size, epoch_size=epoch_size) as stream:
            return [list(stream) for _ in range(6)]

    assert run(0) == run(1) == run(4)


@pytest.mark.parametrize("buffer_size", [0, 2])
def test_empty_stream_with_fixed_epochs_is_an_error(buffer_size: int) -> None:
    """An empty stream cannot fill a fixed-size epoch: it raises instead of spinning."""
    stream = StreamWrapper(list, buffer_size=buffer_size, epoch_size=3, name="empty")
    with stream, pytest.raises(EmptyStreamError, match="stream 'empty' is empty"):
        list(stream)


def test_empty_stream_with_one_pass_epochs_gives_empty_epochs() -> None:
    """With epoch_size <= 0 an empty stream gives empty epochs, like an empty DataLoader."""
    with StreamWrapper(list, buffer_size=1) as stream:
        assert [list(stream), list(stream)] == [[], []]


class _Boom(KeyError):
    pass


def _failing() -> Iterator[int]:
    yield 1
    yield 2
    raise _Boom("disk gone")


@pytest.mark.parametrize("buffer_size", [0, 3])
def test_producer_exception_keeps_its_type_and_traceback(buffer_size: int) -> None:
    """The stream's exception reaches the consumer after the batches before it, same type, with its frames."""
    got = []
    stream = StreamWrapper(_failing, buffer_size=buffer_size)
    with stream, pytest.raises(_Boom, match="disk gone") as info:
        for batch in stream:
            got.append(batch)
    assert got == [1, 2]
    frames = [entry.name for entry in info.traceback]
    assert "_failing" in frames
    assert not _threads()


def test_stall_raises_a_timeout_error_naming_the_stream() -> None:
    """A stuck source raises StallError naming the stream at its deadline, not after joining the producer."""
    release = threading.Event()

    def hanging() -> Iterator[int]:
        yield 1
        release.wait(30)

    stream = StreamWrapper(hanging, buffer_size=1, timeout=0.2, name="slow")
    try:
        it = iter(stream)
        assert next(it) == 1
        started = time.monotonic()
        with pytest.raises(StallError, match=r"stream 'slow': no batch for 0\.2 s") as info:
            next(it)
        waited = time.monotonic() - started
        assert isinstance(info.value, TimeoutError)
        assert waited < 6.0  # the deadline plus a busy machine's slack; joining the stuck producer took 10 s
        assert _threads("slow")  # left to exit on its own when its source returns
        stream.close()  # nothing left to join
        assert time.monotonic() - started < 6.0
    finally:
        release.set()
    assert _wait_for(lambda: not _threads("slow"))
    assert list(stream) == [1]  # the rest of the epoch, from a fresh stream


class _FailsOnce:
    """A stream factory whose first stream raises after one batch; later ones are whole."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> Iterator[str]:
        self.calls += 1
        return self._stream(self.calls == 1)

    @staticmethod
    def _stream(fail: bool) -> Iterator[str]:
        yield "a"
        if fail:
            raise OSError("transient")
        yield "b"


@pytest.mark.parametrize("epoch_size", [-1, 3])
def test_after_a_producer_exception_the_next_epoch_is_fresh(epoch_size: int) -> None:
    """After the stream raised, the next epoch starts a fresh stream, buffered or not alike."""
    runs = []
    for buffer_size in (0, 2):
        with StreamWrapper(_FailsOnce(), buffer_size=buffer_size, epoch_size=epoch_size) as stream:
            with pytest.raises(OSError, match="transient"):
                list(stream)
            runs.append(([list(stream) for _ in range(2)], stream.epoch))
        assert not _threads()
    assert runs[0] == runs[1]
    expected = [["a", "b"], ["a", "b"]] if epoch_size <= 0 else [["a", "b"], ["a", "b", "a"]]
    assert runs[0] == (expected, 2)


def test_producer_starts_on_first_batch_and_stops_on_close_without_with() -> None:
    """Without ``with``, the thread starts with the first batch and close() stops it."""
    stream = StreamWrapper(_Sized(5), buffer_size=2, epoch_size=3)
    assert not _threads()
    it = iter(stream)
    assert next(it) == 0
    assert _threads()
    stream.close()
    stream.close()
    assert not _threads()


def test_break_and_garbage_collection_stop_the_producer() -> None:
    """Breaking out of an epoch, or dropping the stream, stops its thread at once."""
    stream = StreamWrapper(_Sized(50), buffer_size=2, epoch_size=20)
    for batch in stream:
        if batch == 3:
            break
    assert _wait_for(lambda: not _threads())
    assert list(stream) == list(range(16))  # the rest of the epoch, from a fresh stream

    stream = StreamWrapper(_Sized(50), buffer_size=2, epoch_size=20)
    assert next(iter(stream)) == 0
    del stream
    gc.collect()
    assert _wait_for(lambda: not _threads())


def test_gated_producer_runs_only_when_allowed() -> None:
    """A gated producer stays put between batches and fills its buffer inside allow_buffering."""
    pulled = []

    def source() -> Iterator[int]:
        for i in range(100):
            pulled.append(i)
            yield i

    with StreamWrapper(source, buffer_size=4, gated=True, epoch_size=50) as stream:
        it = iter(stream)
        assert next(it) == 0
        time.sleep(0.1)  # a gated producer must not run ahead now
        assert len(pulled) <= 2
        with stream.allow_buffering:
            assert _wait_for(lambda: len(pulled) >= 6)
        assert [next(it) for _ in range(5)] == [1, 2, 3, 4, 5]


def test_profile_telemetry_and_stage_times() -> None:
    """Each batch's wait lands in the profile under the stream's name and in telemetry(); the
    producer's busy time is the stage time the report draws."""
    profile: dict[str, list[float]] = {}
    with StreamWrapper(_Sized(5), buffer_size=2, epoch_size=4, name="train", profile=profile) as stream:
        for _ in range(3):
            list(stream)
    assert len(profile["train"]) == 12
    report = stream.telemetry()
    assert report["name"] == "train" and report["batches"] == 12 and report["epochs"] == 3
    assert {"wait_p50_ms", "wait_p99_ms", "producer_busy_s"} <= set(report)
    json.dumps(report)
    stages = stream.stage_times()
    assert list(stages) == ["stream 'train': producer busy"]
    assert stages["stream 'train': producer busy"] == pytest.approx(report["producer_busy_s"], abs=1e-4)


@pytest.mark.parametrize("buffer_size", [0, 2])
def test_standalone_state_replays_the_pass(buffer_size: int) -> None:
    """A stream on its own resumes after the saved batch by replaying its current pass."""
    with StreamWrapper(_Sized(6), buffer_size=buffer_size, epoch_size=4) as stream:
        reference = [list(stream) for _ in range(4)]
    with StreamWrapper(_Sized(6), buffer_size=buffer_size, epoch_size=4) as stream:
        list(stream)
        it = iter(stream)
        next(it), next(it), next(it)
        state = json.loads(json.dumps(stream.state_dict()))
    with StreamWrapper(_Sized(6), buffer_size=buffer_size, epoch_size=4) as restored:
        restored.load_state_dict(state)
        assert restored.state_dict() == state
        assert [list(restored) for _ in range(3)] == [reference[1][3:], reference[2], reference[3]]


def test_spec_rules_and_presets_validate() -> None:
    """The stream presets compose and validate; thread options without a buffer are refused."""
    for preset in ("epochs", "fixed_epochs", "buffered"):
        spec = loaderfactory.validate(loaderfactory.compose([f"stream={preset}"]))
        assert spec.stream.kind == "epochs"
    with pytest.raises(loaderfactory.ConfigError, match=r"stream.timeout: needs the producer thread"):
        loaderfactory.validate(loaderfactory.compose(["stream=epochs", "stream.timeout=1.0"]))
    spec = loaderfactory.validate(
        {"dataset": {"kind": "synthetic"}, "stream": {"kind": "epochs", "epoch_len": 7, "buffer": 2}}
    )
    assert (spec.stream.epoch_size, spec.stream.buffer_size) == (7, 2)


def test_loader_reports_the_stream() -> None:
    """A Loader with a stream slot has the stream's length and merges its telemetry."""
    config = {
        "dataset": {"kind": "synthetic", "length": 10, "fields": {"x": {"shape": [2]}}},
        "loader": {"kind": "torch", "batch_size": 3},
        "stream": {"kind": "epochs", "epoch_size": 5, "buffer_size": 2},
    }
    with loaderfactory.build_loader(config) as loader:
        assert len(loader) == 5
        batches = [b["index"].tolist() for _ in range(2) for b in loader]
        report = loader.telemetry()
    assert batches[:5] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9], [0, 1, 2]]
    assert report["components"]["stream"]["batches"] == 10


def _draw(stream: StreamWrapper, count: int) -> tuple[list[int], dict[str, Any]]:
    """Take ``count`` batches across epochs without abandoning the stream; return them and the state."""
    got: list[int] = []
    it = iter(stream)
    while len(got) < count:
        try:
            got.append(next(it))
        except StopIteration:
            it = iter(stream)
    return got, json.loads(json.dumps(stream.state_dict()))


@settings(max_examples=40, deadline=None)
@given(
    length=st.integers(1, 6),
    epoch_size=st.sampled_from([-1, 1, 2, 4, 7]),
    buffer_size=st.sampled_from([0, 2]),
    first=st.integers(0, 12),
    second=st.integers(0, 12),
)
def test_standalone_stream_resumes_twice(
    length: int, epoch_size: int, buffer_size: int, first: int, second: int
) -> None:
    """Saved, restored, advanced and saved again, a stream on its own still yields exactly the rest."""

    def build() -> StreamWrapper:
        return StreamWrapper(_Sized(length), buffer_size=buffer_size, epoch_size=epoch_size)

    size = epoch_size if epoch_size > 0 else length
    flat = [i % length for i in range(first + second + 2 * size)]  # epochs cut the cycled stream
    with build() as stream:
        got, state = _draw(stream, first)
    with build() as stream:
        stream.load_state_dict(state)
        more, state = _draw(stream, second)
    done = first + second
    assert got + more == flat[:done]
    end = done if done and done % size == 0 else (done // size + 1) * size  # of the epoch under way
    with build() as restored:
        restored.load_state_dict(state)
        assert restored.state_dict() == state
        assert list(restored) == flat[done:end]
        assert list(restored) == flat[end : end + size]
        assert restored.epoch == end // size + 1


@pytest.mark.parametrize("buffer_size", [0, 2])
def test_state_after_an_early_break_resumes_like_the_original(buffer_size: int) -> None:
    """After a break the next epoch restarts the stream; a state saved then or later resumes in step."""

    def build() -> StreamWrapper:
        return StreamWrapper(_Sized(100), buffer_size=buffer_size, epoch_size=10)

    with build() as stream:
        for batch in stream:
            if batch == 2:
                break
        at_break = stream.state_dict()
        assert list(stream) == list(range(7))  # the rest of the epoch, from a fresh stream
        later = stream.state_dict()
        expected = [list(stream) for _ in range(2)]
    assert expected == [list(range(7, 17)), list(range(17, 27))]
    with build() as restored:
        restored.load_state_dict(at_break)
        assert list(restored) == list(range(7))
    with build() as restored:
        restored.load_state_dict(later)
        assert [list(restored) for _ in range(2)] == expected
