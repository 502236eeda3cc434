"""Ctrl-C while a loader is being built: what was built is closed and named."""

from __future__ import annotations

import pytest
from torch.utils.data import Dataset

from loaderfactory import build_loader
from loaderfactory.errors import BuildInterrupted


class _LengthInterrupted(Dataset[int]):
    """A dataset whose length Ctrl-C interrupts (the loader asks for it while it is built)."""

    def __len__(self) -> int:
        raise KeyboardInterrupt

    def __getitem__(self, index: int) -> int:
        return index


def test_ctrl_c_while_building_names_the_slots_built_and_the_one_being_built() -> None:
    """A ``KeyboardInterrupt`` inside the loader slot's build becomes :class:`BuildInterrupted`
    (still a ``KeyboardInterrupt``) with ``built == ["dataset"]`` and ``building == "loader"``."""
    config = {"loader": {"kind": "torch", "batch_size": 2}, "prefetch": {"kind": "thread"}}
    with pytest.raises(KeyboardInterrupt) as caught:
        build_loader(config, dataset=_LengthInterrupted())
    assert isinstance(caught.value, BuildInterrupted)
    assert (caught.value.built, caught.value.building) == (["dataset"], "loader")
