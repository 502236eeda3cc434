"""Prefetch on a background thread: ``ThreadBuffer`` and the ``DataLoader`` built on it.

Improves on MONAI's design: blocking waits instead of a polling loop, the source's exception
re-raised in the consumer after the items before it, ``timeout`` as a stall deadline, a thread that
never outlives an early ``break``, ``close()`` or garbage collection, and ``repeats`` that ``len()``
counts and that echo copies, so in-place edits of one echo never leak into the next.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from torch.utils.data import DataLoader, Dataset

from loaderfactory.components.data.batch_utils import clone_batch
from loaderfactory.components.state import UPSTREAM, UpstreamState, check_matching, require_keys
from loaderfactory.components.workers.channel import Channel, ChannelClosed
from loaderfactory.errors import StallError

T = TypeVar("T")

_JOIN_SECONDS = 10.0
"""How long ``close()`` waits for a producer stuck inside its source before giving up on it."""


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
    source: Iterator[Any], channel: Channel[Any], snapshot: UpstreamState | None = None, skip: int = 0
) -> None:
    try:
        for item in source:
            if skip:  # a restored buffer replaying what its consumer already had
                skip -= 1
                continue
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
        self._echoes: list[Any] = []
        self._done = False
        skip, partial = owner._begin_pass()
        self._partial = partial
        self._thread = threading.Thread(
            target=_produce,
            args=(iter(owner.src), self._channel, owner._upstream_state, skip),
            name=f"loaderfactory-{owner.name}",
            daemon=True,
        )
        self._thread.start()
        # Stop the thread when this pass is garbage collected without being closed.
        self._finalizer = weakref.finalize(self, _stop, self._channel, self._thread)

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
        try:
            item = self._channel.get(self._owner.timeout)
        except TimeoutError:
            # The producer is stuck inside its source: joining it would turn a stall deadline
            # into a hang. Close the channel so it exits when the source returns, and raise now.
            self._done = True
            self._echoes = []
            self._finalizer.detach()
            self._channel.close()
            raise StallError(
                f"{self._owner.name}: no batch from its source for {self._owner.timeout} s "
                "(timeout); the source is stuck or too slow: raise the timeout or check the source"
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
        """Stop the producer and join it; safe to call twice."""
        self._done = True
        self._echoes = []
        self._finalizer()

    @property
    def buffered(self) -> int:
        return len(self._channel)


def _same(item: T) -> T:
    return item


def _stop(channel: Channel[Any], thread: threading.Thread) -> None:
    channel.close()
    if thread is threading.current_thread():
        return
    thread.join(_JOIN_SECONDS)
    if thread.is_alive():
        warnings.warn(
            f"{thread.name}: the source did not return within {_JOIN_SECONDS} s of close(); "
            "the daemon thread is left to finish its current item",
            RuntimeWarning,
            stacklevel=3,
        )


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
    """

    def __init__(
        self,
        src: Iterable[T],
        buffer_size: int = 1,
        timeout: float | None = None,
        repeats: int = 1,
        copy_echoes: bool = True,
        name: str = "ThreadBuffer",
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

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue after the saved item (and echo) on the next ``iter()``."""
        require_keys(self.name, state, ("consumed", "echoes_done", "repeats"))
        check_matching(self.name, state, {"repeats": self.repeats})
        self.close()
        self._pending = dict(state)

    def __enter__(self) -> ThreadBuffer[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Reiterable(Generic[T]):
    def __init__(self, make: Callable[[], Iterator[T]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[T]:
        return self._make()


class ThreadDataLoader(DataLoader[Any]):
    """A ``torch.utils.data.DataLoader`` whose batches are prefetched by a :class:`ThreadBuffer`.

    Use it where code expects a real ``DataLoader``. With ``num_workers=0`` and a dataset that
    releases the GIL (I/O, numpy, torch ops), loading overlaps the training step at the cost of
    one thread instead of worker processes.

    Args:
        dataset: the dataset to load from.
        buffer_size: batches fetched ahead by the thread.
        buffer_timeout: stall deadline in seconds for the next batch (``None`` waits forever).
        num_workers: ``DataLoader`` worker processes beneath the thread.
        repeats: yield each batch this many times (data echoing); ``len()`` counts them.
        copy_echoes: see :class:`ThreadBuffer`.
        **kwargs: any other ``DataLoader`` argument (``batch_size``, ``shuffle``, ...).
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        buffer_size: int = 1,
        buffer_timeout: float | None = None,
        num_workers: int = 0,
        repeats: int = 1,
        copy_echoes: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, num_workers=num_workers, **kwargs)
        self.buffer = ThreadBuffer(
            _Reiterable(self._batches),
            buffer_size=buffer_size,
            timeout=buffer_timeout,
            repeats=repeats,
            copy_echoes=copy_echoes,
            name="ThreadDataLoader",
        )
        self.buffer_size = buffer_size
        self.buffer_timeout = buffer_timeout
        self.repeats = repeats

    def _batches(self) -> Iterator[Any]:
        return super().__iter__()

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # yields batches, as DataLoader does
        return iter(self.buffer)

    def __len__(self) -> int:
        return super().__len__() * self.repeats

    def close(self) -> None:
        """Stop the prefetch thread (and with it the pass over the ``DataLoader``)."""
        self.buffer.close()

    def __enter__(self) -> ThreadDataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
