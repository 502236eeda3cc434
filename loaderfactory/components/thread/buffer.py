"""Prefetch on a background thread: ``ThreadBuffer``.

Improves on MONAI's design: blocking waits instead of a polling loop, the source's exception
re-raised in the consumer after the items before it, ``timeout`` as a stall deadline, a thread that
stops at an early ``break``, ``close()`` or garbage collection (one stuck in its source is left as
a daemon after a bounded grace, with a warning, instead of being joined for long), and
``repeats`` that ``len()`` counts and that echo copies, so in-place edits of one echo never leak
into the next.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from loaderfactory.components.data.batch_utils import clone_batch
from loaderfactory.components.state import (
    UPSTREAM,
    StateFieldError,
    UpstreamState,
    check_matching,
    replay_length,
    require_int,
    require_keys,
    require_state,
)
from loaderfactory.components.workers.channel import Channel, ChannelClosed, Gate
from loaderfactory.components.workers.lifecycle import finish_threads, stopping_together
from loaderfactory.errors import StallError

T = TypeVar("T")


class _Signal:
    """Base of what the producer sends besides plain items (one type check per item)."""

    __slots__ = ()


class _End(_Signal):
    """Marks the end of the source; ``state`` is the upstream's state after it (when tracked)."""

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self.state = state


class _Snapped(_Signal):
    """An item with the upstream's state right after it was pulled (for ``state_dict()``)."""

    __slots__ = ("item", "state")

    def __init__(self, item: Any, state: dict[str, Any]) -> None:
        self.item = item
        self.state = state


class _Failure(_Signal):
    """Carries the source's exception to the consumer."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _produce(
    source: Iterator[Any],
    channel: Channel[Any],
    snapshot: UpstreamState | None = None,
    skip: int = 0,
    gate: Gate | None = None,
) -> None:
    try:
        # A restored buffer replays what its consumer already had: dropped at once, ungated.
        for _ in itertools.islice(source, skip):
            pass
        for item in source if gate is None else gate.pace(source, channel):
            channel.put(item if snapshot is None else _Snapped(item, snapshot()))
        channel.put(_End(None if snapshot is None else snapshot()))
    except ChannelClosed:
        pass
    except BaseException as error:  # noqa: BLE001 - forwarded to the consumer, re-raised there
        with contextlib.suppress(ChannelClosed):
            channel.put(_Failure(error))
    finally:
        close = getattr(source, "close", None)
        if callable(close):
            close()


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
            target=_produce,
            args=(iter(owner.src), self._channel, owner._upstream_state, skip, self._gate),
            name=f"loaderfactory-{owner.name}",
            daemon=True,
        )
        self._thread.start()
        # Stop the thread when this pass is garbage collected without being closed.
        self._finalizer = weakref.finalize(
            self, _stop, self._channel, self._thread, self._gate, owner.unblock
        )

    def __iter__(self) -> _Pass[T]:
        return self

    def __next__(self) -> T:
        owner = self._owner
        if self._echoes:
            owner._consumed += 1
            if len(self._echoes) == 1:
                owner._echoes_done = 0
            else:
                owner._echoes_done += 1
            return self._echoes.pop()  # type: ignore[no-any-return]  # echoes are items of the source
        if self._done:
            raise StopIteration
        if self._gate is not None and not self._channel:
            self._gate.grant_one()  # a gated producer pulls the item this consumer now waits for
        try:
            item = self._channel.get(self._owner.timeout)
        except TimeoutError:
            # The producer is stuck inside its source: joining it would turn a stall deadline
            # into a hang. Close the channel so it exits when the source returns, and raise now.
            self._done = True
            self._echoes = []
            self._finalizer.detach()
            self._channel.close()
            if self._gate is not None:
                self._gate.wake()
            if owner.unblock is not None:
                with stopping_together(wait=False):  # stop what it waits on, at once
                    owner.unblock()
            raise StallError(
                owner.stall_message
                or f"{owner.name}: no batch from its source for {owner.timeout} s (timeout); "
                "the source is stuck or too slow: raise the timeout or check the source"
            ) from None
        except ChannelClosed:
            raise StopIteration from None
        if isinstance(item, _Signal):
            if isinstance(item, _End):
                self.close()
                owner._finish_pass(item.state)
                raise StopIteration
            if isinstance(item, _Failure):
                self.close()
                raise item.error
            if isinstance(item, _Snapped):
                owner._state_before, owner._state_after = owner._state_after, item.state
                item = item.item
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


def _stop(
    channel: Channel[Any],
    thread: threading.Thread,
    gate: Gate | None,
    unblock: Callable[[], None] | None = None,
) -> None:
    with stopping_together():  # one grace for what the producer waits on and for the producer
        channel.close()
        if gate is not None:
            gate.wake()  # a gated producer waits on the gate, not on the channel
        if unblock is not None:
            unblock()
        # Bounded: a producer stuck inside its source is left to finish as a daemon, with a warning.
        finish_threads([thread], thread.name)


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
        # A weak reference: a pass abandoned by an early ``break`` is collected at once, and
        # collecting it stops its thread.
        self._pass: weakref.ref[_Pass[T]] | None = None
        # Resume (see loaderfactory.components.state): what the consumer got in the current pass,
        # and the upstream's state before and after the source item it got last.
        self._upstream_state: UpstreamState | None = None
        self._consumed = 0
        self._echoes_done = 0
        self._state_before: dict[str, Any] | None = None
        self._state_after: dict[str, Any] | None = None
        self._pending: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[T]:
        self.close()
        current = _Pass(self)
        self._pass = weakref.ref(current)
        return current

    def __len__(self) -> int:
        return len(self.src) * self.repeats  # type: ignore[arg-type]  # TypeError for unsized sources, as len() should

    def close(self) -> None:
        """Stop and join the background thread of the current pass, if any."""
        current = self._pass() if self._pass is not None else None
        if current is not None:
            current.close()
        self._pass = None

    def bind_upstream_state(self, fn: UpstreamState | None) -> None:
        """Snapshot ``fn()`` after each item the thread pulls (a ``Loader`` binds it)."""
        self._upstream_state = fn

    def _begin_pass(self) -> tuple[int, int]:
        """Start the consumer's counts (from a loaded state); returns (source items to drop, echoes had)."""
        skip = consumed = done = 0
        pending, self._pending = self._pending, None
        if pending is not None:
            consumed, done = int(pending["consumed"]), int(pending["echoes_done"])
            if self._upstream_state is None:
                # Standalone, nothing restored the source: replay it, dropping what was delivered.
                skip = max(0, (consumed - done) // self.repeats)
        # A restored pass goes on counting from the saved state, so saving it again resumes right.
        self._consumed = consumed
        self._echoes_done = done
        start = self._upstream_state() if self._upstream_state is not None else None
        self._state_before = self._state_after = start
        return skip, done

    def _finish_pass(self, state: dict[str, Any] | None) -> None:
        self._consumed = 0
        self._echoes_done = 0
        self._state_before = self._state_after = state

    def state_dict(self) -> dict[str, Any]:
        """Items handed out in this pass (echoes included) and the upstream's state as of them."""
        if self._pending is not None:
            return dict(self._pending)
        state: dict[str, Any] = {
            "consumed": self._consumed,
            "echoes_done": self._echoes_done,
            "repeats": self.repeats,
        }
        # Mid-echo the item must be pulled again, so the upstream goes back to before it.
        upstream = self._state_before if self._echoes_done else self._state_after
        if upstream is not None:
            state[UPSTREAM] = upstream
        return state

    def _replay_length(self) -> int | None:
        return replay_length(self._upstream_state is not None, self)

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
