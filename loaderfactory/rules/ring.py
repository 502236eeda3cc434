"""How many batches collated into a ring of reused buffers (``collate: ring``) are alive at once.

A ring of ``ring_size`` buffer sets overwrites a batch when it collates the ``ring_size``-th batch
after it, so ``ring_size`` must be at least the number of its batches alive together: the one in
your loop, those the stages after the collate hold (a thread buffer of ``buffer_size: b`` holds
``b`` queued and one more its thread has pulled and waits to queue), and those collated ahead by
workers. ``(field, message, value)`` as every rule; the counts are exact upper bounds read from
the stages' code (``components/thread/buffer.py``, torch's ``_try_put_index``,
``components/workers/threads.py``).
"""

from __future__ import annotations

from loaderfactory.rules import Problem

MIN_RING = 2
"""``RingCollate`` refuses fewer buffer sets: a batch outlives the next."""


def alive_in_consumer_thread(held_after: int, shards: int = 1) -> int:
    """Collated where it is consumed (no workers): your loop's batch and those held after the collate.

    ``shards`` is the batches (collate calls) per step.
    """
    return shards * (1 + held_after)


def alive_per_worker_process(
    held_after: int, num_workers: int, ahead_per_worker: int, in_order: bool, shards: int = 1
) -> int:
    """Each worker process has a ring of its own.

    In order, torch gives worker ``w`` every ``num_workers``-th task and sends one new task per
    batch it hands on: while your loop holds one of ``w``'s batches, ``w`` may have collated
    ``ahead_per_worker`` (``prefetch_factor``) more, plus one per ``num_workers`` batches held
    after the loader. Out of order, every batch held after the loader may be ``w``'s.
    """
    downstream = held_after // num_workers if in_order else held_after
    return shards * (1 + ahead_per_worker + downstream)


def alive_in_thread_workers(held_after: int, num_workers: int, in_flight: int, shards: int = 1) -> int:
    """Thread workers share one ring and take a slot when they collate, not in step order.

    One thread collates in order: your loop's step, those held after the loader and the
    ``in_flight`` steps ahead. Two or more may collate a step before an older one, so the steps
    collated since your loop's step span the in-flight window on both of its sides.
    """
    spread = in_flight if num_workers == 1 else 2 * in_flight
    return shards * (1 + held_after + spread)


def ring_problems(path: str, ring_size: int, alive: int, reasons: list[str]) -> list[Problem]:
    """``path`` (the ``ring_size`` field) is refused when fewer than ``alive`` (at least 2).

    ``reasons`` say where the alive batches are, each naming its config fields.
    """
    need = max(MIN_RING, alive)
    if ring_size >= need:
        return []
    message = (
        f"must be >= {need}: up to {alive} batches collated into the ring are alive at once "
        f"({'; '.join(reasons)}), so ring_size {ring_size} overwrites batches still in use; "
        f"set ring_size: {need} (or hold fewer batches after the collate)"
    )
    return [(path, message, ring_size)]
