"""Builders of collate functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loaderfactory.components.data.collate import DictCollate
from loaderfactory.components.data.ring_collate import RingCollate
from loaderfactory.components.data.stacked import default_collate
from loaderfactory.components.data.tuple_collate import TupleCollate
from loaderfactory.config.specs.collate import (
    DefaultCollateSpec,
    DictCollateSpec,
    RingCollateSpec,
    TupleCollateSpec,
)


def build_default_collate(spec: DefaultCollateSpec) -> Callable[[list[Any]], Any]:
    return default_collate


def build_dict_collate(spec: DictCollateSpec) -> DictCollate:
    return DictCollate(
        spec.keys, spec.stack_tensors, spec.convert_numpy, spec.convert_numbers, spec.on_unstackable
    )


def build_ring_collate(spec: RingCollateSpec) -> RingCollate:
    return RingCollate(spec.ring_size, spec.keys, spec.pin_memory)


def build_tuple_collate(spec: TupleCollateSpec) -> TupleCollate:
    return TupleCollate(spec.keys)
