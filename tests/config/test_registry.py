"""The registry: built-ins in one table per slot, user kinds by call or decorator, replace rules, lookups."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import pytest

from loaderfactory import ConfigError, available, build_loader, register, validate
from loaderfactory.builders import BuildContext
from loaderfactory.config import registry
from loaderfactory.config.specs.base import Spec


class TakeSpec(Spec):
    """A test prefetch kind: passes on only the first ``n`` batches."""

    kind: Literal["take_first"] = "take_first"
    n: int = 1


class Take:
    def __init__(self, upstream: Any, n: int) -> None:
        self.upstream, self.n = upstream, n

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(self.upstream):
            if i >= self.n:
                return
            yield batch

    def __len__(self) -> int:
        return min(self.n, len(self.upstream))


def build_take(spec: TakeSpec, upstream: Any, context: BuildContext) -> Take:
    return Take(upstream, spec.n)


@pytest.fixture
def take_kind() -> Iterator[str]:
    """Registers ``take_first`` in the prefetch table for one test, then removes it."""
    register("prefetch", "take_first", TakeSpec, build_take)
    yield "take_first"
    registry.unregister("prefetch", "take_first")


def test_builtins_are_registered() -> None:
    """The spine's built-in kinds are available in their tables."""
    assert {"synthetic", "tensor_folder", "_target_"} <= set(available("dataset"))
    assert "torch" in available("loader")
    assert "thread" in available("prefetch")
    assert "default" in available("collate")


def test_available_is_sorted_per_table() -> None:
    """``available`` lists a table's kinds in sorted order."""
    for table in registry.TABLES:
        assert available(table) == sorted(available(table))


def test_unknown_table_is_refused() -> None:
    """Asking for a table that does not exist names the real ones."""
    with pytest.raises(ValueError, match="unknown registry table 'prefetcher'; known: dataset, queue"):
        available("prefetcher")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown registry table"):
        register("prefetcher", "x", TakeSpec, build_take)  # type: ignore[arg-type]


def test_registered_kind_validates_and_builds(take_kind: str) -> None:
    """A user kind is selected by name and built like a built-in."""
    assert take_kind in available("prefetch")
    config = {
        "dataset": {"kind": "synthetic", "length": 20},
        "loader": {"kind": "torch", "batch_size": 2},
        "prefetch": {"kind": take_kind, "n": 3},
    }
    with build_loader(config) as loader:
        assert isinstance(loader["prefetch"], Take)
        assert len(loader) == 3
        assert len(list(loader)) == 3


def test_registered_kind_reports_errors_at_its_paths(take_kind: str) -> None:
    """A user spec's errors carry dotted paths and the allowed fields, like a built-in's."""
    with pytest.raises(
        ConfigError, match=r"prefetch.nn: unknown field \(got 2\). Did you mean 'n'\? Allowed: n"
    ) as info:
        validate({"dataset": {"kind": "synthetic"}, "prefetch": {"kind": take_kind, "nn": 2}})
    assert info.value.paths == ["prefetch.nn"]


def test_unknown_kind_error_lists_user_kinds_too(take_kind: str) -> None:
    """The known kinds in an unknown-kind error include registered user kinds."""
    with pytest.raises(ConfigError, match="Did you mean 'take_first'\\? Known: take_first, thread"):
        validate({"dataset": {"kind": "synthetic"}, "prefetch": {"kind": "take_frist"}})


def test_decorator_registers_and_returns_the_builder() -> None:
    """``register(table, kind, Spec)`` used as a decorator registers the function it decorates."""
    try:

        @register("prefetch", "take_decorated", TakeSpec)
        def builder(spec: TakeSpec, upstream: Any, context: BuildContext) -> Take:
            return Take(upstream, spec.n)

        assert registry.lookup("prefetch", "take_decorated").builder is builder
        assert "take_decorated" in available("prefetch")
    finally:
        registry.unregister("prefetch", "take_decorated")


def test_reregistering_raises_unless_replace(take_kind: str) -> None:
    """A second registration of the same name raises; ``replace=True`` swaps the builder."""
    with pytest.raises(
        ValueError, match="prefetch kind 'take_first' is already registered; pass replace=True"
    ):
        register("prefetch", take_kind, TakeSpec, build_take)

    def other(spec: TakeSpec, upstream: Any, context: BuildContext) -> Take:
        return Take(upstream, 0)

    register("prefetch", take_kind, TakeSpec, other, replace=True)
    assert registry.lookup("prefetch", take_kind).builder is other


def test_decorator_reregistering_raises_unless_replace(take_kind: str) -> None:
    """The decorator form follows the same replace rule."""
    with pytest.raises(ValueError, match="already registered"):

        @register("prefetch", take_kind, TakeSpec)
        def again(spec: TakeSpec, upstream: Any, context: BuildContext) -> Take:
            return Take(upstream, 1)

    @register("prefetch", take_kind, TakeSpec, replace=True)
    def replacement(spec: TakeSpec, upstream: Any, context: BuildContext) -> Take:
        return Take(upstream, 1)

    assert registry.lookup("prefetch", take_kind).builder is replacement


def test_builtin_cannot_be_replaced_by_accident() -> None:
    """Built-in names are protected by the same rule."""
    with pytest.raises(ValueError, match="prefetch kind 'thread' is already registered"):
        register("prefetch", "thread", TakeSpec, build_take)
    assert registry.lookup("prefetch", "thread").spec.__name__ == "ThreadBufferSpec"


def test_spec_must_be_a_spec_subclass() -> None:
    """Registering with something that is not a Spec class is a TypeError."""
    with pytest.raises(TypeError, match=r"must subclass loaderfactory\.Spec"):
        register("prefetch", "bad", dict, build_take)  # type: ignore[arg-type]
    assert "bad" not in available("prefetch")


def test_lookup_unknown_kind_is_a_config_error() -> None:
    """``lookup`` of an unknown kind raises ConfigError at ``<table>.kind`` with the closest match."""
    with pytest.raises(
        ConfigError, match=r"loader\.kind: unknown loader kind 'trch'\. Did you mean 'torch'"
    ) as info:
        registry.lookup("loader", "trch")
    assert info.value.paths == ["loader.kind"]


def test_unregister_removes_and_tolerates_missing() -> None:
    """``unregister`` removes a kind and ignores one that is not there."""
    register("prefetch", "short_lived", TakeSpec, build_take)
    registry.unregister("prefetch", "short_lived")
    registry.unregister("prefetch", "short_lived")
    assert "short_lived" not in available("prefetch")
