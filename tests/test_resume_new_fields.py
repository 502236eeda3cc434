"""A state saved before a spec field existed loads while the field keeps its default."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import loaderfactory
from loaderfactory.errors import ResumeError


def _config(**dataset: Any) -> dict[str, Any]:
    return {
        "dataset": {"kind": "synthetic", "length": 12, **dataset},
        "loader": {"kind": "torch", "batch_size": 3, "shuffle": True},
        "seed": 3,
    }


def _state_without(field: str, **dataset: Any) -> tuple[dict[str, Any], list[int]]:
    """A state saved after one batch, as an older version without ``field`` would have saved it,
    and the ids of the batches an uninterrupted epoch draws after it."""
    with loaderfactory.build_loader(_config(**dataset)) as loader:
        batches = iter(loader)
        next(batches)
        state = copy.deepcopy(loader.state_dict())
        rest = [int(i) for batch in batches for i in batch["index"]]
    assert field in state["config"]["dataset"]
    del state["config"]["dataset"][field]
    return state, rest


def test_a_field_missing_from_an_old_state_at_its_default_resumes_exactly() -> None:
    state, rest = _state_without("fields")  # a default made by a factory, of nested specs
    with loaderfactory.build_loader(_config()) as loader:
        loader.load_state_dict(state)
        resumed = [int(i) for batch in loader for i in batch["index"]]
    assert resumed == rest


def test_a_field_missing_from_an_old_state_but_set_now_is_refused() -> None:
    state, _ = _state_without("seed")
    with (
        loaderfactory.build_loader(_config(seed=7)) as loader,
        pytest.raises(ResumeError, match=r"dataset\.seed: saved \(absent\), now 7"),
    ):
        loader.load_state_dict(state)
