"""What the producer thread of a :class:`~loaderfactory.components.thread.buffer.ThreadBuffer`
runs, sends and how it is stopped."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from loaderfactory.components.workers.channel import Channel, ChannelClosed, Gate
from loaderfactory.components.workers.lifecycle import finish_threads, stopping_together


class Signal:
    """Base of what the producer sends besides plain items (one type check per item)."""

    __slots__ = ()


class End(Signal):
    """Marks the end of the source; ``state`` is the upstream's snapshot after it (when tracked)."""

    def __init__(self, state: Any = None) -> None:
        self.state = state


class Snapped(Signal):
    """An item with the upstream's snapshot right after it was pulled (for ``state_dict()``)."""

    __slots__ = ("item", "state")

    def __init__(self, item: Any, state: Any) -> None:
        self.item = item
        self.state = state


class Failure(Signal):
    """Carries the source's exception to the consumer."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def produce(
    source: Iterator[Any],
    channel: Channel[Any],
    snapshot: Callable[[], Any] | None = None,
    skip: int = 0,
    gate: Gate | None = None,
) -> None:
    try:
        # A restored buffer replays what its consumer already had: dropped at once, ungated.
        for _ in itertools.islice(source, skip):
            pass
        for item in source if gate is None else gate.pace(source, channel):
            channel.put(item if snapshot is None else Snapped(item, snapshot()))
        channel.put(End(None if snapshot is None else snapshot()))
    except ChannelClosed:
        pass
    except BaseException as error:  # noqa: BLE001 - forwarded to the consumer, re-raised there
        with contextlib.suppress(ChannelClosed):
            channel.put(Failure(error))
    finally:
        close = getattr(source, "close", None)
        if callable(close):
            close()


def stop_pass(
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
