"""A loader kind and a dataset kind registered at run time, as a user does, keep every contract.

Each kind is what CONTRIBUTING.md asks for: a component, a spec, a builder, one ``register`` call
(with its contract) and a preset; here the preset folder joins Hydra's search path by an override.
The contract tests of ``test_contracts.py`` and ``test_dataset_contracts.py`` run over them as found
there (every test that takes a ``case``), so a contract added there is checked here too.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
import torch
from pydantic import PositiveInt
from torch.utils.data import default_collate

import loaderfactory
from loaderfactory import Contract, Spec
from loaderfactory.config import registry
from loaderfactory.config.registry import CONTRACT_LENGTH
from loaderfactory.hydra.cli import kinds_help
from tests import test_contracts, test_dataset_contracts
from tests.test_contracts import Case, missing_contracts


class Squares:
    """Toy dataset: item ``i`` is ``{"image": [i, i²], "label": i % 2, "index": i}``."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        image = torch.tensor([index, index * index], dtype=torch.float32)
        return {"image": image, "label": torch.tensor(index % 2), "index": index}


class Strided:
    """Toy loader: batches of a per-epoch shuffle, in the consumer's thread; resumable."""

    def __init__(self, dataset: Any, batch_size: int, seed: int) -> None:
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed
        self.epoch, self.position, self._resume_at = 0, 0, 0
        self._pass: Iterator[Any] | None = None

    def __len__(self) -> int:
        return math.ceil(len(self.dataset) / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        start, self._resume_at = self._resume_at, 0
        self._pass = self._batches(self.epoch, start)
        return self._pass

    def _batches(self, epoch: int, start: int) -> Iterator[Any]:
        order = torch.randperm(len(self.dataset), generator=torch.Generator().manual_seed(self.seed + epoch))
        for step in range(start, len(self)):
            self.position = step + 1  # before the yield: a state taken after this batch counts it
            chunk = order[step * self.batch_size : (step + 1) * self.batch_size]
            yield default_collate([self.dataset[int(i)] for i in chunk])
        self.epoch, self.position = epoch + 1, 0

    def footprint(self, item_bytes: int, batch_bytes: int) -> tuple[str, int, str]:
        return "the consumer's thread", 2 * batch_bytes, "a batch being collated"

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._resume_at = self.position

    def close(self) -> None:
        self._pass = None


class SquaresSpec(Spec):
    """Toy dataset of squares."""

    kind: Literal["squares"] = "squares"
    length: PositiveInt = 16
    """Items."""


class StridedSpec(Spec):
    """Toy loader: shuffled batches in the consumer's thread."""

    kind: Literal["strided"] = "strided"
    batch_size: PositiveInt = 1
    """Items per batch."""
    seed: int = 0
    """Seed of the first epoch's shuffle; epoch e uses seed + e."""


def build_squares(spec: SquaresSpec, upstream: None, context: Any) -> Squares:
    return Squares(spec.length)


def build_strided(spec: StridedSpec, upstream: Any, context: Any) -> Strided:
    return Strided(upstream, spec.batch_size, spec.seed)


PRESETS = {"dataset/squares.yaml": "kind: squares\nlength: 16\n", "loader/strided.yaml": "kind: strided\n"}
PRESETS["loader/strided.yaml"] += "batch_size: 1\nseed: 0\n"


@pytest.fixture
def user_kinds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Case]]:
    """``squares`` and ``strided`` registered through ``loaderfactory.register``, removed afterwards."""
    presets = tmp_path_factory.mktemp("presets")
    for name, text in PRESETS.items():
        (presets / name).parent.mkdir(exist_ok=True)
        (presets / name).write_text(text)
    path = f"hydra.searchpath=[file://{presets}]"
    squares = Contract([path, "dataset=squares", f"dataset.length={CONTRACT_LENGTH}"])
    strided = Contract([path, "loader=strided", "loader.batch_size=4"])
    loaderfactory.register("dataset", "squares", SquaresSpec, build_squares, contract=squares)
    loaderfactory.register("loader", "strided", StridedSpec, build_strided, contract=strided)
    try:
        yield {"dataset": Case("dataset", "squares", squares), "loader": Case("loader", "strided", strided)}
    finally:
        registry.unregister("dataset", "squares")
        registry.unregister("loader", "strided")


def contract_tests(module: Any) -> list[Callable[..., None]]:
    """The module's contract tests: every test that takes a ``case``."""
    tests = [f for name, f in vars(module).items() if name.startswith("test_") and callable(f)]
    return [f for f in tests if "case" in inspect.signature(f).parameters]


def arguments(test: Callable[..., None]) -> list[dict[str, Any]]:
    """Every combination of the test's own parametrisations, but for the ones that choose the case."""
    grid: list[dict[str, Any]] = [{}]
    for mark in getattr(test, "pytestmark", []):
        names = mark.args[0] if mark.name == "parametrize" else "case"
        if isinstance(names, str) and "case" not in names and "," not in names:
            grid = [{**g, names: value} for g, value in itertools.product(grid, mark.args[1])]
    return grid


def run_contract(test: Callable[..., None], case: Case, folder: Path, capsys: Any) -> None:
    """``test`` for ``case``, once per combination of its other parameters, each in a fresh folder."""
    accepted = inspect.signature(test).parameters
    for number, args in enumerate(arguments(test)):
        place = folder / str(number)
        place.mkdir()
        given = {"case": case, "tmp_path": place, "capsys": capsys, "extra": (), **args}
        test(**{name: value for name, value in given.items() if name in accepted})


@pytest.mark.parametrize("test", contract_tests(test_contracts), ids=lambda f: f.__name__)
def test_a_loader_kind_of_yours_keeps_every_slot_contract(
    test: Callable[..., None], user_kinds: dict[str, Case], tmp_path: Path, capsys: Any
) -> None:
    """len, close, break, exact resume, its preset, plan and validate output: as for a built-in kind."""
    run_contract(test, user_kinds["loader"], tmp_path, capsys)


@pytest.mark.parametrize("test", contract_tests(test_dataset_contracts), ids=lambda f: f.__name__)
def test_a_dataset_kind_of_yours_keeps_every_dataset_contract(
    test: Callable[..., None], user_kinds: dict[str, Case], tmp_path: Path, capsys: Any
) -> None:
    """len, indexing, reproducible items, epochs with and without workers, validate output."""
    run_contract(test, user_kinds["dataset"], tmp_path, capsys)


def test_the_contract_runner_runs_each_parametrisation() -> None:
    """The resume contract runs at each of its stopping points; the case's own parametrisation is left out."""
    assert arguments(test_contracts.test_resume_yields_exactly_the_rest) == [
        {"stop_at": 0},
        {"stop_at": 3},
        {"stop_at": 9},
    ]
    names = {f.__name__ for f in contract_tests(test_contracts)}
    assert {"test_len_is_what_each_epoch_yields", "test_plan_estimates_what_it_runs_and_holds"} <= names


def test_your_kinds_show_in_help_and_need_no_edit_elsewhere(user_kinds: dict[str, Case]) -> None:
    """``--help`` lists them with their package, and they carry the contracts the checks need."""
    assert missing_contracts() == []
    package = SquaresSpec.__module__.split(".")[0]  # where pytest imported this file from
    help_text = kinds_help()
    assert f"squares ({package})" in help_text and f"strided ({package})" in help_text


def test_a_kind_breaking_a_contract_fails_it(user_kinds: dict[str, Case], tmp_path: Path) -> None:
    """A loader that forgets its position on restore fails the resume contract: the runner checks."""
    registry.register(
        "loader", "strided", StridedSpec, lambda *a: _Forgetful(build_strided(*a)), replace=True
    )
    with pytest.raises(AssertionError):
        run_contract(test_contracts.test_resume_yields_exactly_the_rest, user_kinds["loader"], tmp_path, None)


class _Forgetful(Strided):
    def __init__(self, inner: Strided) -> None:
        super().__init__(inner.dataset, inner.batch_size, inner.seed)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass  # starts over: the batches before the saved position come again
