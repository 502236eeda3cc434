"""Prefetch on a background thread: ``ThreadBuffer``.

Improves on MONAI's design: blocking waits instead of a polling loop, the source's exception
re-raised in the consumer after the items before it, ``timeout`` as a stall deadline, a thread that
stops at an early ``break``, ``close()`` or garbage collection (one stuck in its source is left as
a daemon after a bounded grace, with a warning, instead of being joined for long), and
``repeats`` that ``len()`` counts and that echo copies, so in-place edits of one echo never leak
into the next.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from loaderfactory.components.data.batch_utils import clone_batch
from loaderfactory.components.state import (
    UPSTREAM,
    Snapshots,
    StateFieldError,
    check_matching,
    replay_length,
    require_int,
    require_keys,
    require_state,
)
from loaderfactory.components.thread.producer import End, Signal, Snapped, produce, stop_pass
from loaderfactory.components.workers.channel import Channel, ChannelClosed, Gate
from loaderfactory.components.workers.current_pass import CurrentPass
from loaderfactory.components.workers.lifecycle import stopping_together
from loaderfactory.errors import StallError

T = TypeVar("T")

_UNSET: Any = object()
"""No upstream snapshot taken yet: the upstream's current one stands for it."""


class _Pass(Generic[T]):
    """One pass over the source: owns the producer thread until the pass ends or is closed."""

    def __init__(self, owner: ThreadBuffer[T]) -> None:
        self._owner = owner
        self._channel: Channel[Any] = Channel(owner.buffer_size)
        self._gate = owner.gate
        self._echoes: list[Any] = []
        self._done = False
        skip, partial = owner._begin_pass()
        self._partial = partial
        self._thread = threading.Thread(
            target=produce,
            args=(iter(owner.src), self._channel, owner._snapshot_upstream, skip, self._gate),
            name=f"loaderfactory-{owner.name}",
            daemon=True,
        )
        self._thread.start()
        # Stop the thread when this pass is garbage collected without being closed.
        self._finalizer = weakref.finalize(
            self, stop_pass, self._channel, self._thread, self._gate, owner.unblock
        )

    def __iter__(self) -> _Pass[T]:
        return self

    def __next__(self) -> T:
        if self._echoes:
            return self._next_echo()
        if self._done:
            raise StopIteration
        if self._gate is not None and not self._channel:
            self._gate.grant_one()  # a gated producer pulls the item this consumer now waits for
        try:
            item = self._channel.get(self._owner.timeout)
        except TimeoutError:
            raise self._stalled() from None
        except ChannelClosed:
            raise StopIteration from None
        if isinstance(item, Signal):
            item = self._signalled(item)
        return self._first_of(item)

    def _next_echo(self) -> T:
        owner = self._owner
        owner._consumed += 1
        if len(self._echoes) == 1:
            owner._echoes_done = 0
        else:
            owner._echoes_done += 1
        return self._echoes.pop()  # type: ignore[no-any-return]  # echoes are items of the source

    def _stalled(self) -> StallError:
        """The producer is stuck inside its source: joining it would turn a stall deadline into a
        hang. Close the channel so it exits when the source returns, and return the error to raise."""
        owner = self._owner
        self._done = True
        self._echoes = []
        self._finalizer.detach()
        self._channel.close()
        if self._gate is not None:
            self._gate.wake()
        if owner.unblock is not None:
            with stopping_together(wait=False):  # stop what it waits on, at once
                owner.unblock()
        return StallError(
            owner.stall_message
            or f"{owner.name}: no batch from its source for {owner.timeout} s (timeout); "
            "the source is stuck or too slow: raise the timeout or check the source"
        )

    def _signalled(self, signal: Signal) -> Any:
        """The item a tracked snapshot came with; the end of the pass or a failure raise."""
        owner = self._owner
        if isinstance(signal, Snapped):  # first: one per item when the upstream is tracked
            owner._state_before, owner._state_after = owner._state_after, signal.state
            return signal.item
        self.close()
        if isinstance(signal, End):
            owner._finish_pass(signal.state)
            raise StopIteration
        raise signal.error  # type: ignore[attr-defined]  # a Failure

    def _first_of(self, item: Any) -> T:
        """``item``, keeping its echoes (copies first, the original last) for the next calls."""
        owner = self._owner
        owner._consumed += 1
        repeats = owner.repeats - self._partial
        self._partial = 0
        if repeats > 1:
            # Yield copies first and the original last: an in-place edit of one echo never
            # reaches the next. Stored reversed because pop() takes from the end.
            copy = clone_batch if owner.copy_echoes else _same
            self._echoes = [item] + [copy(item) for _ in range(repeats - 1)]
            owner._echoes_done = owner.repeats - repeats + 1
            return self._echoes.pop()  # type: ignore[no-any-return]  # echoes are items of the source
        owner._echoes_done = 0
        return item  # type: ignore[no-any-return]  # items of the source

    def close(self) -> None:
        """Stop the producer and join it (within a bounded grace); safe to call twice."""
        self._done = True
        self._echoes = []
        self._finalizer()

    @property
    def buffered(self) -> int:
        return len(self._channel)


def _same(item: T) -> T:
    return item


class ThreadBuffer(Generic[T]):
    """Iterate ``src`` on a background thread, up to ``buffer_size`` items ahead of the consumer.

    Use it when producing an item and consuming it both release the GIL or wait on I/O: the
    training step and loading then overlap. Costs one thread and ``buffer_size`` items of memory.
    Each ``iter()`` starts a fresh pass over ``src`` (and stops the previous one).

    Args:
        src: any iterable; iterated on the background thread.
        buffer_size: items fetched ahead; at least 1.
        timeout: seconds the consumer waits for the next item before raising
            :class:`~loaderfactory.errors.StallError` (a ``TimeoutError``); ``None`` waits forever.
        repeats: yield each item this many times (data echoing); ``len()`` counts the echoes.
        copy_echoes: echoes are deep copies of tensors and arrays, so editing one in place leaves
            the others intact; turn off to save the copies when the consumer never edits batches.
        name: names the thread and appears in errors.
        gate: pauses the producer between items until the consumer lets it run (see
            :class:`~loaderfactory.components.workers.channel.Gate`); ``None`` never pauses it.
        stall_message: the :class:`~loaderfactory.errors.StallError` text, for a stage that
            wraps the buffer and names its own setting; by default it names ``name``.
        unblock: called when a pass stops, before its thread is waited for, to release a
            producer blocked inside ``src`` (a stage whose source waits on worker processes).
    """

    def __init__(
        self,
        src: Iterable[T],
        buffer_size: int = 1,
        timeout: float | None = None,
        repeats: int = 1,
        copy_echoes: bool = True,
        name: str = "ThreadBuffer",
        *,
        gate: Gate | None = None,
        stall_message: str | None = None,
        unblock: Callable[[], None] | None = None,
    ) -> None:
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be > 0 or None, got {timeout}")
        self.src = src
        self.buffer_size = buffer_size
        self.timeout = timeout
        self.repeats = repeats
        self.copy_echoes = copy_echoes
        self.name = name
        self.gate = gate
        self.stall_message = stall_message
        self.unblock = unblock
        # Held weakly: a pass abandoned by an early ``break`` is collected at once, and collecting
        # it stops its thread.
        self._pass: CurrentPass[_Pass[T]] = CurrentPass()
        # Resume (see loaderfactory.components.state): what the consumer got in the current pass,
        # and the upstream's snapshots before and after the source item it got last.
        self._upstream: Snapshots | None = None
        self._snapshot_upstream: Callable[[], Any] | None = None
        self._consumed = 0
        self._echoes_done = 0
        self._state_before: Any = _UNSET
        self._state_after: Any = _UNSET
        self._pending: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[T]:
        return self._pass.start(lambda: _Pass(self))

    def __len__(self) -> int:
        return len(self.src) * self.repeats  # type: ignore[arg-type]  # TypeError for unsized sources, as len() should

    def close(self) -> None:
        """Stop and join the background thread of the current pass, if any (from any thread)."""
        self._pass.close()

    def track_upstream(self, upstream: Snapshots | None) -> None:
        """Keep ``upstream.state_snapshot()`` beside each item the thread pulls (a ``Loader`` calls it)."""
        self._upstream = upstream
        self._snapshot_upstream = None if upstream is None else upstream.state_snapshot

    def _begin_pass(self) -> tuple[int, int]:
        """Start the consumer's counts (from a loaded state); returns (source items to drop, echoes had)."""
        skip = consumed = done = 0
        pending, self._pending = self._pending, None
        if pending is not None:
            consumed, done = int(pending["consumed"]), int(pending["echoes_done"])
            if self._upstream is None:
                # Standalone, nothing restored the source: replay it, dropping what was delivered.
                skip = max(0, (consumed - done) // self.repeats)
        # A restored pass goes on counting from the saved state, so saving it again resumes right.
        self._consumed = consumed
        self._echoes_done = done
        start = self._snapshot_upstream() if self._snapshot_upstream is not None else _UNSET
        self._state_before = self._state_after = start
        return skip, done

    def _finish_pass(self, state: Any) -> None:
        self._consumed = 0
        self._echoes_done = 0
        self._state_before = self._state_after = state

    def state_dict(self) -> dict[str, Any]:
        """Items handed out in this pass (echoes included) and, when tracked, the upstream's state
        as of them."""
        return self.state_from_snapshot(self.state_snapshot())

    def state_snapshot(self) -> tuple[int, int, Any]:
        """``(consumed, echoes_done, upstream snapshot)``: cheap, see :meth:`state_from_snapshot`."""
        pending = self._pending
        if pending is not None:
            consumed, done, upstream = int(pending["consumed"]), int(pending["echoes_done"]), _UNSET
        else:
            consumed, done = self._consumed, self._echoes_done
            # Mid-echo the item must be pulled again, so the upstream goes back to before it.
            upstream = self._state_before if done else self._state_after
        if upstream is _UNSET and self._snapshot_upstream is not None:
            upstream = self._snapshot_upstream()  # no item pulled: the upstream stands where it is
        return consumed, done, upstream

    def state_from_snapshot(self, snapshot: tuple[int, int, Any]) -> dict[str, Any]:
        """The :meth:`state_dict` this buffer had when :meth:`state_snapshot` returned ``snapshot``."""
        consumed, done, upstream = snapshot
        state: dict[str, Any] = {"consumed": consumed, "echoes_done": done, "repeats": self.repeats}
        if self._upstream is not None:
            state[UPSTREAM] = self._upstream.state_from_snapshot(upstream)
        return state

    def _replay_length(self) -> int | None:
        return replay_length(self._upstream is not None, self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue after the saved item (and echo) on the next ``iter()``.

        Raises:
            ResumeError: the state was saved with other ``repeats``, or a field is missing, of the
                wrong type or out of range (more items than a standalone pass of the source has).
        """
        owner = self.name
        state = require_state(owner, state)
        require_keys(owner, state, ("consumed", "echoes_done", "repeats"))
        require_int(owner, state, "repeats", low=1)
        check_matching(owner, state, {"repeats": self.repeats})
        consumed = require_int(owner, state, "consumed", high=self._replay_length())
        done = require_int(owner, state, "echoes_done", high=self.repeats - 1)
        if done != consumed % self.repeats:
            # Echoes come in runs of ``repeats``: after ``consumed`` items the run stands at their rest.
            raise StateFieldError(
                owner, "echoes_done", f"must be consumed % repeats = {consumed % self.repeats}, got {done}"
            )
        self.close()
        self._pending = dict(state)

    def footprint(self, item_bytes: int, batch_bytes: int) -> tuple[str, int, str]:
        """For ``run.mode=plan``: (what runs, bytes of data held at most, what those bytes are)."""
        echo = 1 if self.repeats > 1 and self.copy_echoes else 0
        held = self.buffer_size + echo  # the buffer and an echo's copy; the batch in transit is upstream's
        return "1 producer thread", held * batch_bytes, f"{held} batches"

    def __enter__(self) -> ThreadBuffer[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        # With an exception on its way out, the producer is not waited for: the error comes first.
        with stopping_together(wait=exc[0] is None):
            self.close()
