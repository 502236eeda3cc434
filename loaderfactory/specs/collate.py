"""Specs of collate functions."""

from __future__ import annotations

from typing import Literal

from loaderfactory.specs.base import Spec


class DefaultCollateSpec(Spec):
    """torch's ``default_collate``: stacks tensors, converts numbers and arrays, recurses into dicts."""

    kind: Literal["default"] = "default"
