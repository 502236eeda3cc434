"""The package's public names: written once, all importable, each the object its module defines."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import loaderfactory
from loaderfactory import _EXPORTS


def test_all_is_the_sorted_table_of_public_names() -> None:
    """``__all__`` is derived from the one table of public names, sorted, and names nothing private."""
    assert loaderfactory.__all__ == sorted(_EXPORTS)
    assert len(loaderfactory.__all__) >= 20  # the table was read, not silently empty
    assert not [name for name in loaderfactory.__all__ if name.startswith("_")]


@pytest.mark.parametrize("name", loaderfactory.__all__)
def test_each_public_name_is_its_modules_object(name: str) -> None:
    """``loaderfactory.<name>`` resolves lazily to the very object its defining module holds."""
    assert getattr(loaderfactory, name) is getattr(importlib.import_module(_EXPORTS[name]), name)


def test_star_import_binds_exactly_all() -> None:
    """``from loaderfactory import *`` in a fresh interpreter binds every name of ``__all__`` and no other."""
    code = (
        "before = set(globals()); from loaderfactory import *; import loaderfactory; "
        "assert sorted(set(globals()) - before - {'before', 'loaderfactory'}) == loaderfactory.__all__"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=240)
