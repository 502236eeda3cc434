"""``StreamWrapper``: epochs of a fixed size over any restartable stream, optionally buffered.

Improves on emloop's design: buffering works with or without ``with`` (the thread starts on the
first batch and stops on ``close()``, leaving ``with``, an early ``break`` or garbage collection),
the producer never sleeps (``allow_buffering`` gates it on a condition), its exception reaches the
consumer with its own type and traceback, a stall raises :class:`~loaderfactory.errors.StallError`,
an empty stream with a fixed epoch size raises instead of spinning, and the position resumes.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any

from loaderfactory.components.state import (
    UPSTREAM,
    Snapshots,
    check_matching,
    replay_length,
    require_int,
    require_keys,
    require_state,
)
from loaderfactory.components.stream.parts import END, StreamEvent, Timeline, events
from loaderfactory.components.thread.buffer import ThreadBuffer
from loaderfactory.components.workers.channel import Gate
from loaderfactory.components.workers.lifecycle import stopping_together

_UNSET: Any = object()
"""No upstream snapshot taken yet: the upstream's current one stands for it."""


class StreamWrapper:
    """Batches of ``stream_fn()``, restarted at its end, cut into epochs, optionally buffered.

    Use it to train by fixed-size epochs over a stream that ends (or never does), or to overlap
    producing batches with the training step. With ``epoch_size <= 0`` one pass of the stream is
    one epoch; with ``epoch_size = n`` every epoch is exactly ``n`` batches, the next one starts
    where the last stopped, and a stream that ends mid-epoch is restarted at once. A buffered
    stream costs one thread (a :class:`~loaderfactory.components.thread.buffer.ThreadBuffer`'s)
    and ``buffer_size`` batches of memory; it yields the same sequence as an unbuffered one.

    Iterate it once per epoch (``for batch in stream``); ``len()`` is the epoch length. Breaking
    out of an epoch stops the producer and drops the stream; the next ``for`` finishes that epoch
    from a fresh ``stream_fn()``.

    Args:
        stream_fn: makes a fresh stream (an iterable of batches); called at the start and at each
            end of the stream. Give it a ``__len__`` to let ``len()`` work with ``epoch_size <= 0``.
        buffer_size: batches produced ahead on a background thread; 0 produces on the caller.
        epoch_size: batches per epoch; ``<= 0`` means one pass of the stream.
        name: names the thread, the profile entry and errors.
        profile: a dict that receives each batch's consumer wait (seconds) under ``name``.
        timeout: seconds to wait for the next buffered batch before raising
            :class:`~loaderfactory.errors.StallError`; ``None`` waits forever.
        gated: the producer runs only while the consumer waits for a batch or holds
            :attr:`allow_buffering` (for training steps that release the GIL in native code).
    """

    def __init__(
        self,
        stream_fn: Callable[[], Iterable[Any]],
        buffer_size: int = 0,
        epoch_size: int = -1,
        name: str | None = None,
        profile: dict[str, list[float]] | None = None,
        timeout: float | None = None,
        *,
        gated: bool = False,
    ) -> None:
        if buffer_size < 0:
            raise ValueError(f"buffer_size must be >= 0, got {buffer_size}")
        if timeout is not None and (timeout <= 0 or buffer_size == 0):
            raise ValueError(
                f"timeout must be > 0 and needs buffer_size >= 1, got {timeout} (buffer {buffer_size})"
            )
        self.stream_fn = stream_fn
        self.buffer_size = buffer_size
        self.epoch_size = epoch_size
        self.name = name or "stream"
        self.profile = profile
        self.timeout = timeout
        self.gated = gated
        self.timeline = Timeline()
        self._gate = Gate(gated)
        self._source: Iterator[StreamEvent] | None = None  # the events, pulled here or through _buffer
        self._buffer: ThreadBuffer[StreamEvent] | None = None  # buffered: the producer thread
        self._upstream: Snapshots | None = None
        self._epoch = 0
        self._in_epoch = 0
        self._position = 0
        self._snapshot: Any = _UNSET  # the upstream's snapshot as of the last batch or end taken
        self._pending: dict[str, Any] | None = None

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        return _Epoch(self)

    def __len__(self) -> int:
        if self.epoch_size > 0:
            return self.epoch_size
        try:
            return len(self.stream_fn)  # type: ignore[arg-type]  # TypeError below when unsized
        except TypeError:
            raise TypeError(
                f"{self.name}: one pass of the stream has no known length; set epoch_size"
            ) from None

    @property
    def epoch(self) -> int:
        """Epochs completed."""
        return self._epoch

    def _start(self) -> Iterator[StreamEvent]:
        skip = 0
        pending, self._pending = self._pending, None
        # A fresh stream starts at its first batch; a restored one goes on from the saved batch.
        self._position = int(pending["position"]) if pending is not None else 0
        if pending is not None and self._upstream is None:
            # Standalone, nothing restored the stream: replay its pass. (In a Loader the slots
            # before were restored to where this stream's consumer stood.)
            skip = self._position
        snapshot = None if self._upstream is None else self._upstream.state_snapshot
        source = events(self.stream_fn, self.epoch_size, self.name, snapshot, skip, self.timeline)
        if self.buffer_size == 0:
            self._source = source
            return source
        # The buffer's pass holds the thread: dropping this wrapper drops the pass, which stops it.
        self._buffer = ThreadBuffer(
            source,
            self.buffer_size,
            self.timeout,
            name=self.name,
            gate=self._gate,
            stall_message=(
                f"stream {self.name!r}: no batch for {self.timeout} s (timeout); its source is "
                "stuck or too slow: raise stream.timeout or check the slots before it"
            ),
        )
        self._source = iter(self._buffer)
        return self._source

    def _take(self) -> Any:
        """The next batch of this epoch; ``StopIteration`` ends the epoch."""
        started = time.perf_counter()
        while True:
            if 0 < self.epoch_size <= self._in_epoch:
                self._end_epoch()
            try:
                source = self._source if self._source is not None else self._start()
                kind, batch, state = next(source)
            except StopIteration:
                self._drop_stream()
                raise
            except BaseException:
                # A failed stream is over (buffered or not): the next epoch starts a fresh one. The
                # error reaches the loop first: the producer is not waited for.
                with stopping_together(wait=False):
                    self._abandon()
                raise
            if kind == END:
                self._position = 0
                self._snapshot = state
                if self.epoch_size <= 0:
                    self._drop_stream()
                    self._end_epoch()
                continue
            ended = time.perf_counter()
            self._in_epoch += 1
            self._position += 1
            self._snapshot = state
            self.timeline.consumed(started, ended)
            if self.profile is not None:
                self.profile.setdefault(self.name, []).append(ended - started)
            return batch

    def _end_epoch(self) -> None:
        self._epoch += 1
        self._in_epoch = 0
        raise StopIteration

    def _drop_stream(self) -> None:
        """Stop producing and forget the stream; the consumer's counts stay."""
        source, buffer = self._source, self._buffer
        self._source = self._buffer = None
        if buffer is not None:
            # Joins the thread; one left stuck in its source by a stall is not waited for.
            buffer.close()
        elif isinstance(source, Generator):
            source.close()

    def _abandon(self) -> None:
        """Drop the stream before its end: the next batch comes from a fresh ``stream_fn()``."""
        running = self._source is not None
        self._drop_stream()
        if running:
            # The next stream_fn() starts at its first batch. The upstream snapshot stays: a
            # Loader's state still says where this stream's consumer stood.
            self._position = 0

    def close(self) -> None:
        """Stop and join the producer thread, if any; safe to call twice."""
        self._abandon()

    def __enter__(self) -> StreamWrapper:
        return self

    def __exit__(self, *exc: object) -> None:
        # With an exception on its way out, the producer is not waited for: the error comes first.
        with stopping_together(wait=exc[0] is None):
            self.close()

    @property
    def allow_buffering(self) -> Any:
        """A context manager that lets a ``gated`` producer run while it is held."""
        return self._gate.allow()

    # -- resume --------------------------------------------------------------------------------

    def track_upstream(self, upstream: Snapshots | None) -> None:
        """Keep ``upstream.state_snapshot()`` beside each batch pulled from the stream (a ``Loader``
        calls it)."""
        self._upstream = upstream

    def state_dict(self) -> dict[str, Any]:
        """Epochs done, batches of this epoch and of the current pass, and, when tracked, the
        upstream's state as of them."""
        return self.state_from_snapshot(self.state_snapshot())

    def state_snapshot(self) -> tuple[int, int, int, Any]:
        """``(epoch, in_epoch, position, upstream snapshot)``: cheap, see :meth:`state_from_snapshot`."""
        pending = self._pending
        if pending is not None:
            epoch, in_epoch, position = (int(pending[k]) for k in ("epoch", "in_epoch", "position"))
            upstream = _UNSET
        else:
            epoch, in_epoch, position, upstream = self._epoch, self._in_epoch, self._position, self._snapshot
        if upstream is _UNSET and self._upstream is not None:
            upstream = self._upstream.state_snapshot()  # no batch pulled: it stands where it is
        return epoch, in_epoch, position, upstream

    def state_from_snapshot(self, snapshot: tuple[int, int, int, Any]) -> dict[str, Any]:
        """The :meth:`state_dict` this stream had when :meth:`state_snapshot` returned ``snapshot``."""
        epoch, in_epoch, position, upstream = snapshot
        state: dict[str, Any] = {
            "epoch": epoch,
            "in_epoch": in_epoch,
            "position": position,
            "epoch_size": self.epoch_size,
        }
        if self._upstream is not None:
            state[UPSTREAM] = self._upstream.state_from_snapshot(upstream)
        return state

    def _replay_length(self) -> int | None:
        return replay_length(self._upstream is not None, self.stream_fn)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue after the saved batch on the next iteration.

        Raises:
            ResumeError: the state was saved with another ``epoch_size``, or a field is missing, of
                the wrong type or out of range (past the epoch, or past a standalone pass).
        """
        owner = f"stream {self.name!r}"
        state = require_state(owner, state)
        require_keys(owner, state, ("epoch", "in_epoch", "position", "epoch_size"))
        require_int(owner, state, "epoch_size", low=None)
        check_matching(owner, state, {"epoch_size": self.epoch_size})
        epoch = require_int(owner, state, "epoch")
        in_epoch = require_int(
            owner, state, "in_epoch", high=self.epoch_size if self.epoch_size > 0 else None
        )
        position = require_int(owner, state, "position", high=self._replay_length())
        self.close()
        self._epoch, self._in_epoch = epoch, in_epoch
        self._position, self._snapshot = position, _UNSET
        self._pending = dict(state)

    def telemetry(self) -> dict[str, Any]:
        """Consumer wait per batch, producer busy time, epochs: for the report."""
        return {"name": self.name, "epochs": self._epoch, **self.timeline.summary()}

    def footprint(self, item_bytes: int, batch_bytes: int) -> tuple[str, int, str]:
        """For ``run.mode=plan``: (what runs, bytes of data held at most, what those bytes are)."""
        runs = "1 producer thread" if self.buffer_size else "the consumer's thread"
        return runs, self.buffer_size * batch_bytes, f"{self.buffer_size} buffered batches"

    def stage_times(self) -> dict[str, float]:
        """Seconds the producer thread spent pulling batches, for the report's figure."""
        return {f"stream {self.name!r}: producer busy": self.timeline.busy_total}


class _Epoch:
    """One epoch of a :class:`StreamWrapper`; closing it before its end stops the producer."""

    def __init__(self, owner: StreamWrapper) -> None:
        self._owner: StreamWrapper | None = owner
        self._finalizer = weakref.finalize(self, owner._abandon)

    def __iter__(self) -> _Epoch:
        return self

    def __next__(self) -> Any:
        if self._owner is None:
            raise StopIteration
        try:
            return self._owner._take()
        except BaseException:
            self._owner = None
            self._finalizer.detach()  # ended (or failed) on its own: keep the producer for the next epoch
            raise

    def close(self) -> None:
        """Stop the producer if this epoch did not run to its end."""
        self._owner = None
        self._finalizer()
