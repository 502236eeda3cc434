"""Contracts every registered slot kind keeps, checked automatically for each one.

A kind joins these tests through its registration: ``register(..., contract=[overrides])`` names the
overrides that put it into the small pipeline (see :class:`loaderfactory.config.registry.Contract`).
``tests/test_user_kinds.py`` runs the same checks over kinds registered at run time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from loaderfactory import Contract, Loader, available, build_loader, compose
from loaderfactory.config import registry
from loaderfactory.hydra.cli import run_app
from loaderfactory.plan import format_plan, make_plan

BASE = [
    "dataset.length=42",
    "dataset.fields.image.shape=[2]",
    "seed=3",
]
"""A small pipeline: 42 tiny items (image, label, index), seeded; each contract picks batches of 4."""

PIPELINE_SLOTS = [slot for slot in registry.SLOTS if slot != "dataset"]


class Case(NamedTuple):
    """One contract of one registered kind."""

    slot: registry.Table
    kind: str
    contract: Contract

    def __str__(self) -> str:
        return f"{self.slot}:{self.kind}" + (f"-{self.contract.name}" if self.contract.name else "")


def cases(slots: list[registry.Table]) -> list[Case]:
    """Every contract of every registered kind of ``slots`` (``_target_`` is not a kind)."""
    return [
        Case(slot, kind, contract)
        for slot in slots
        for kind in available(slot)
        if not kind.startswith("_")
        for contract in registry.lookup(slot, kind).contracts
    ]


def missing_contracts(slots: tuple[registry.Table, ...] = registry.SLOTS) -> list[str]:
    """The registered kinds of ``slots`` that declare no contract."""
    return [
        f"{slot} {kind!r}"
        for slot in slots
        for kind in available(slot)
        if not kind.startswith("_") and not registry.lookup(slot, kind).contracts
    ]


CASES = cases(PIPELINE_SLOTS)


def build(case: Case, folder: Path, *extra: str) -> Loader:
    """The small pipeline with the case's kind in its slot (and no prefetch unless that is the slot)."""
    return build_loader(compose(overrides(case, folder, *extra)))


def overrides(case: Case, folder: Path, *extra: str) -> list[str]:
    alone = [] if case.slot == "prefetch" else ["~prefetch"]
    return [*BASE, *alone, *case.contract.overrides(folder), *extra]


def _sets_a_field(override: str) -> bool:
    """``loader.batch_size=4`` does; ``loader=torch`` (a preset), ``~prefetch`` and ``seed=3`` do not."""
    key = override.split("=", 1)[0].lstrip("+~")
    return "." in key and key.split(".", 1)[0] in registry.SLOTS


def indices(batch: Any) -> list[int]:
    return [int(i) for i in batch["index"]]


def test_every_registered_kind_declares_a_contract() -> None:
    """A slot or dataset kind registered without a contract fails here, so no kind escapes the contracts."""
    missing = missing_contracts()
    assert not missing, (
        f"{', '.join(missing)}: pass contract=[the overrides that select it in batches of 4] to its "
        "register(...) call (see 'Adding a component kind' in CONTRIBUTING.md)"
    )


def test_a_kind_without_a_contract_is_named() -> None:
    """The check above names a kind registered without a contract."""
    spec = registry.lookup("prefetch", "thread").spec
    registry.register("prefetch", "no_contract", spec, lambda *args: None)
    try:
        assert missing_contracts(("prefetch",)) == ["prefetch 'no_contract'"]
    finally:
        registry.unregister("prefetch", "no_contract")
    assert missing_contracts(("prefetch",)) == []


@pytest.mark.parametrize("case", CASES, ids=str)
def test_len_is_what_each_epoch_yields(case: Case, tmp_path: Path) -> None:
    """Over three epochs, every epoch yields exactly ``len(loader)`` batches."""
    with build(case, tmp_path) as loader:
        expected = []
        for _ in range(3):
            expected.append(len(loader))  # before the epoch: a rollover changes the next epoch's length
            assert sum(1 for _ in loader) == expected[-1]
        assert loader.stats.batches == sum(expected)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_close_is_idempotent_and_final(case: Case, tmp_path: Path) -> None:
    """``close()`` twice is fine, even mid-epoch, and a closed loader refuses a new epoch."""
    loader = build(case, tmp_path)
    next(iter(loader))
    loader.close()
    loader.close()
    with pytest.raises(RuntimeError, match="closed"):
        iter(loader)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_early_break_then_a_new_epoch_works(case: Case, tmp_path: Path) -> None:
    """Breaking out of an epoch leaves the loader usable: the next epoch runs to its end."""
    with build(case, tmp_path) as loader:
        for _ in loader:
            break
        expected = len(loader)
        if case.contract.break_finishes_epoch:
            expected -= 1
        assert sum(1 for _ in loader) == expected


RESUMED = [(c, ()) for c in CASES if c.contract.exact_resume] + [
    (c, tuple(c.contract.with_workers)) for c in CASES if c.contract.with_workers
]


_UNBROKEN: dict[tuple[str, tuple[str, ...]], tuple[int, list[list[int]]]] = {}


def _unbroken(case: Case, extra: tuple[str, ...], folder: Path) -> tuple[int, list[list[int]]]:
    """An epoch's length and the batches of two unbroken epochs, once per case for every ``stop_at``."""
    if (str(case), extra) not in _UNBROKEN:
        with build(case, folder, *extra) as loader:
            _UNBROKEN[str(case), extra] = len(loader), [indices(b) for _ in range(2) for b in loader]
    return _UNBROKEN[str(case), extra]


@pytest.mark.parametrize(
    ("case", "extra"), RESUMED, ids=lambda v: str(v) if isinstance(v, Case) else "-".join(v)
)
@pytest.mark.parametrize("stop_at", [0, 3, 9])
def test_resume_yields_exactly_the_rest(
    case: Case, extra: tuple[str, ...], stop_at: int, tmp_path: Path
) -> None:
    """Restored from a JSON state taken after batch k, a loader yields batches k+1... of an unbroken run."""
    epoch_length, whole = _unbroken(case, extra, tmp_path)
    assert stop_at < len(whole)
    with build(case, tmp_path, *extra) as first:
        seen = 0
        while seen < stop_at:
            for batch in first:
                assert indices(batch) == whole[seen]
                seen += 1
                if seen == stop_at:
                    break
        state = json.loads(json.dumps(first.state_dict()))
    with build(case, tmp_path, *extra) as second:
        second.load_state_dict(state)
        assert len(second) == epoch_length  # len() is an epoch's, also restored (as Lightning reads it)
        rest = [indices(b) for b in second]
        while len(rest) < len(whole) - stop_at:
            rest += [indices(b) for b in second]
    assert rest[: len(whole) - stop_at] == whole[stop_at:]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_base_preset_builds_unchanged(case: Case, tmp_path: Path) -> None:
    """The preset the contract picks builds as shipped (with the small dataset) and yields a batch."""
    picks = [o for o in case.contract.overrides(tmp_path) if not _sets_a_field(o)]
    assert picks, f"{case}: its contract picks no preset; start it with '{case.slot}=<preset>'"
    with build_loader(compose([*BASE, *picks])) as loader:
        batch = next(iter(loader))
    assert "image" in batch and type(loader[case.slot]).__name__


@pytest.mark.parametrize("case", CASES, ids=str)
def test_plan_estimates_what_it_runs_and_holds(case: Case, tmp_path: Path) -> None:
    """``run.mode=plan`` describes the kind's slot from its component's ``footprint()``, starting nothing."""
    with build(case, tmp_path) as loader:
        plan = make_plan(loader)
        name = type(loader[case.slot]).__name__
    line = next(s for s in plan.slots if s.slot == case.slot)
    assert line.kind == name
    assert "not estimated" not in line.holds, f"{case}: define footprint(item_bytes, batch_bytes) on {name}"
    assert re.search(rf"^  {case.slot} +{name}: {re.escape(line.runs)}; holds up to", format_plan(plan), re.M)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_validate_and_plan_modes_name_the_kind(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's ``run.mode=validate`` and ``run.mode=plan`` name the kind in its slot."""
    for mode in ("validate", "plan"):
        run_app(compose(overrides(case, tmp_path, f"run.mode={mode}")))
        out = capsys.readouterr().out
        assert out.startswith("config OK: ") and f"{case.slot}={case.kind}" in out.splitlines()[0]
    assert f"  {case.slot}" in out and "data held at most:" in out
