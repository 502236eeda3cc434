"""Contracts every registered slot kind keeps, checked automatically for each one.

A new kind joins these tests by adding one line to ``SETUPS``: the overrides that make it small.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from loaderfactory import Loader, available, build_loader, compose
from loaderfactory.config import registry

BASE = [
    "dataset.length=42",
    "dataset.fields.image.shape=[2]",
    "seed=3",
]
"""A small pipeline: 42 tiny items (image, label, index), seeded; each setup picks batches of 4."""

SETUPS: dict[tuple[str, str], list[str]] = {
    ("queue", "ram"): ["queue=ram", "queue.epoch_size=6", "queue.batch_size=4", "queue.capacity=8"],
    ("loader", "torch"): ["loader=torch", "loader.batch_size=4", "loader.shuffle=true"],
    ("loader", "sharded"): [
        "loader=sharded",
        "loader.batch_size=4",
        "loader.shuffle=true",
        "loader.last_batch=rollover",
    ],
    ("stream", "epochs"): [
        "stream=epochs",
        "loader.batch_size=4",
        "stream.epoch_size=7",
        "stream.buffer_size=2",
    ],
    ("prefetch", "thread"): [
        "prefetch=thread",
        "loader.batch_size=4",
        "prefetch.buffer_size=2",
        "prefetch.repeats=2",
    ],
}
"""Per kind: the overrides that put it into the small pipeline."""

INEXACT_RESUME = {("queue", "ram")}
"""Kinds that restore their statistics but not the exact batch order (a queue resamples what it reloads)."""

FINISHES_EPOCH_AFTER_BREAK = {("stream", "epochs")}
"""Kinds whose next ``iter()`` after a break delivers the rest of the broken epoch, not a new one."""

KINDS = [(slot, kind) for slot in ("queue", "loader", "stream", "prefetch") for kind in available(slot)]


def build(slot: str, kind: str, *extra: str) -> Loader:
    """The small pipeline with ``kind`` in ``slot`` (and no prefetch unless that is the slot tested)."""
    alone = [] if slot == "prefetch" else ["~prefetch"]
    return build_loader(compose([*BASE, *alone, *SETUPS[(slot, kind)], *extra]))


def indices(batch: Any) -> list[int]:
    return [int(i) for i in batch["index"]]


def test_every_registered_kind_has_a_setup() -> None:
    """Registering a slot kind without a line in SETUPS fails here, so no kind escapes the contracts."""
    assert set(KINDS) <= set(SETUPS), f"add SETUPS entries for {sorted(set(KINDS) - set(SETUPS))}"


@pytest.mark.parametrize(("slot", "kind"), KINDS)
def test_len_is_what_each_epoch_yields(slot: str, kind: str) -> None:
    """Over three epochs, every epoch yields exactly ``len(loader)`` batches."""
    with build(slot, kind) as loader:
        expected = []
        for _ in range(3):
            expected.append(len(loader))  # before the epoch: a rollover changes the next epoch's length
            assert sum(1 for _ in loader) == expected[-1]
        assert loader.stats.batches == sum(expected)


@pytest.mark.parametrize(("slot", "kind"), KINDS)
def test_close_is_idempotent_and_final(slot: str, kind: str) -> None:
    """``close()`` twice is fine, even mid-epoch, and a closed loader refuses a new epoch."""
    loader = build(slot, kind)
    next(iter(loader))
    loader.close()
    loader.close()
    with pytest.raises(RuntimeError, match="closed"):
        iter(loader)


@pytest.mark.parametrize(("slot", "kind"), KINDS)
def test_early_break_then_a_new_epoch_works(slot: str, kind: str) -> None:
    """Breaking out of an epoch leaves the loader usable: the next epoch runs to its end."""
    with build(slot, kind) as loader:
        for _ in loader:
            break
        expected = len(loader)
        if (slot, kind) in FINISHES_EPOCH_AFTER_BREAK:
            expected -= 1
        assert sum(1 for _ in loader) == expected


EXACT = [k for k in KINDS if k not in INEXACT_RESUME]
WITH_WORKERS = [(("loader", kind), ("loader.num_workers=2",)) for kind in available("loader")]


@pytest.mark.parametrize(
    ("slot_kind", "extra"), [(k, ()) for k in EXACT] + WITH_WORKERS, ids=lambda v: "-".join(v) or "-"
)
@pytest.mark.parametrize("stop_at", [0, 3, 9])
def test_resume_yields_exactly_the_rest(
    slot_kind: tuple[str, str], extra: tuple[str, ...], stop_at: int
) -> None:
    """Restored from a JSON state taken after batch k, a loader yields batches k+1... of an unbroken run."""
    slot, kind = slot_kind
    with build(slot, kind, *extra) as loader:
        epoch_length = len(loader)
        whole = [indices(b) for _ in range(2) for b in loader]
    assert stop_at < len(whole)
    with build(slot, kind, *extra) as first:
        seen = 0
        while seen < stop_at:
            for batch in first:
                assert indices(batch) == whole[seen]
                seen += 1
                if seen == stop_at:
                    break
        state = json.loads(json.dumps(first.state_dict()))
    with build(slot, kind, *extra) as second:
        second.load_state_dict(state)
        assert len(second) == epoch_length  # len() is an epoch's, also restored (as Lightning reads it)
        rest = [indices(b) for b in second]
        while len(rest) < len(whole) - stop_at:
            rest += [indices(b) for b in second]
    assert rest[: len(whole) - stop_at] == whole[stop_at:]


@pytest.mark.parametrize(("slot", "kind"), KINDS)
def test_base_preset_builds_unchanged(slot: str, kind: str) -> None:
    """The preset named after the kind builds as shipped (with the small dataset) and yields a batch."""
    overrides = [o for o in SETUPS[(slot, kind)] if "=" in o and "." not in o.split("=")[0]]
    with build_loader(compose([*BASE, *overrides])) as loader:
        batch = next(iter(loader))
    assert "image" in batch and registry.lookup(slot, kind)  # type: ignore[arg-type]  # slot names are tables
