"""Every private torch name the package uses exists in the installed torch, as the kind we use.

A torch upgrade that renames or removes one fails here, naming it, instead of in a training run.
"""

from __future__ import annotations

import _multiprocessing  # type: ignore[import-not-found]
import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils import pin_memory, signal_handling

from loaderfactory.components.workers import torch_internals
from loaderfactory.components.workers.torch_internals import PRIVATE_NAMES, PrivateName

PACKAGE = Path(torch_internals.__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def owners() -> Iterator[dict[str, Any]]:
    """A real ``_MultiProcessingDataLoaderIter`` (one worker) and what else owns a private name."""
    loader = DataLoader(torch.arange(4), batch_size=2, num_workers=1, persistent_workers=True)
    iterator = iter(loader)
    next(iterator)
    try:
        yield {
            "signal_handling": signal_handling,
            "pin_memory": pin_memory,
            "DataLoader": loader,
            "iterator": iterator,
            "result_queue": iterator._worker_result_queue,  # type: ignore[attr-defined]  # checked below
            "done_event": iterator._workers_done_event,  # type: ignore[attr-defined]
            "condition": iterator._workers_done_event._cond,  # type: ignore[attr-defined]
            "mp_lock": iterator._workers_done_event._cond._lock,  # type: ignore[attr-defined]
            "SemLock": _multiprocessing.SemLock,
        }
    finally:
        iterator._shutdown_workers()  # type: ignore[attr-defined]  # checked below
        loader._iterator = None


@pytest.mark.parametrize("private", PRIVATE_NAMES, ids=lambda p: f"{p.owner}.{p.name}")
def test_private_name_exists_in_installed_torch(private: PrivateName, owners: dict[str, Any]) -> None:
    """Each listed private name is present on its owner, callable where we call it."""
    owner = owners[private.owner]
    assert hasattr(owner, private.name), f"torch {torch.__version__} has no {private.owner}.{private.name}"
    assert callable(getattr(owner, private.name)) == (private.kind == "callable"), private


def test_the_list_names_every_private_name_the_module_uses() -> None:
    """Every ``_name`` read off another object in torch_internals.py is in PRIVATE_NAMES."""
    tree = ast.parse(Path(torch_internals.__file__).read_text())
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
    }
    used |= {
        node.args[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) in {"getattr", "hasattr"}
        and isinstance(node.args[1], ast.Constant)
    }
    listed = {private.name for private in PRIVATE_NAMES}
    assert used - {"_post"} <= listed, sorted(used - listed)


def test_no_other_module_reaches_into_torch_privately() -> None:
    """Only torch_internals.py imports torch's private modules or reads its private names off objects
    (``self._name`` is a class's own attribute)."""
    private = {p.name for p in PRIVATE_NAMES} - {"pin_memory"}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "torch_internals.py":
            continue
        text = path.read_text()
        if "torch.utils.data._utils" in text:
            offenders.append(f"{path}: imports torch.utils.data._utils")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            ours = isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "self"
            if isinstance(node, ast.Attribute) and node.attr in private and not ours:
                offenders.append(f"{path}:{node.lineno}: .{node.attr}")
    assert not offenders, offenders
