"""Builders of collate functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import default_collate

from loaderfactory.specs.collate import DefaultCollateSpec


def build_default_collate(spec: DefaultCollateSpec) -> Callable[[list[Any]], Any]:
    return default_collate
