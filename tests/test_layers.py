"""The layers stay apart at import time: runtime modules never load the config machinery."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "loaderfactory"
CONFIG_MACHINERY = ("pydantic", "hydra", "omegaconf")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


RUNTIME_MODULES = sorted(
    {_module_name(p) for p in (PACKAGE / "components").rglob("*.py")}
    | {"loaderfactory", "loaderfactory.errors", "loaderfactory.loader", "loaderfactory.stats"}
)


PUBLIC_COMPONENTS = (
    "from loaderfactory import Loader, QueueDataset, ShardedDataLoader, StallError, StreamWrapper, "
    "ThreadBuffer, ThreadDataLoader, WorkerError"
)
VALIDATE = "from loaderfactory import validate"
STATEMENTS = [*(f"import {module}" for module in RUNTIME_MODULES), PUBLIC_COMPONENTS, VALIDATE]

# One interpreter imports torch once (the runtime's one heavy import, which loads none of the config
# machinery: checked), then forks a fresh child per statement: each statement still starts from an
# interpreter that has loaded nothing of ours, at the cost of one torch import instead of dozens.
CHILD = """
import json, os, sys, traceback
import torch
statements, machinery = json.loads(sys.argv[1]), tuple(json.loads(sys.argv[2]))

def loaded():
    return sorted(m for m in sys.modules if m.split(".")[0] in machinery)

results = {"torch": loaded()}
for statement in statements:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            exec(statement, {})
            answer = loaded()
        except BaseException:
            answer = traceback.format_exc()
        os.write(write, json.dumps(answer).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        results[statement] = json.loads(pipe.read() or '"the child died"')
    os.waitpid(pid, 0)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def loaded_after() -> dict[str, list[str] | str]:
    """For each statement of ``STATEMENTS``, the config-machinery modules loaded after running it
    alone in a fresh interpreter (or the traceback it raised)."""
    command = [sys.executable, "-c", CHILD, json.dumps(STATEMENTS), json.dumps(CONFIG_MACHINERY)]
    result = subprocess.run(command, capture_output=True, text=True, check=True, timeout=240)
    results: dict[str, list[str] | str] = json.loads(result.stdout.strip().splitlines()[-1])
    assert results.pop("torch") == [], "importing torch loads the config machinery: the forks prove nothing"
    return results


@pytest.mark.parametrize("module", RUNTIME_MODULES)
def test_importing_a_runtime_module_loads_no_config_machinery(
    module: str, loaded_after: dict[str, list[str] | str]
) -> None:
    """A plain-Python user of a component pays for neither pydantic, Hydra nor OmegaConf."""
    assert loaded_after[f"import {module}"] == []


def test_public_components_from_the_package_load_no_config_machinery(
    loaded_after: dict[str, list[str] | str],
) -> None:
    """``from loaderfactory import ThreadBuffer`` stays light: the package resolves names lazily."""
    assert loaded_after[PUBLIC_COMPONENTS] == []


def test_the_config_layer_loads_when_a_name_needs_it(loaded_after: dict[str, list[str] | str]) -> None:
    """``validate`` brings pydantic; the lazy names resolve to the same objects as their modules."""
    assert "pydantic" in loaded_after[VALIDATE]
    import loaderfactory
    from loaderfactory.intake import validate

    assert loaderfactory.validate is validate
    assert sorted(loaderfactory.__all__) == loaderfactory.__all__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        loaderfactory.nope  # noqa: B018 - the attribute access is the test


EDGES = ("loaderfactory.hydra", "loaderfactory.lightning", "loaderfactory.__main__")
"""The modules that may import the Hydra edge; the package's ``__init__`` names ``compose`` lazily."""


def _imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` statement in ``path`` names, relative imports made absolute."""
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def test_the_core_never_imports_the_hydra_edge() -> None:
    """Only ``hydra/``, ``lightning/`` and ``__main__`` import ``loaderfactory.hydra``; the core converts
    OmegaConf nodes through ``loaderfactory.plain``."""
    offenders = {
        _module_name(path): sorted(m for m in _imported_modules(path) if m.startswith("loaderfactory.hydra"))
        for path in PACKAGE.rglob("*.py")
        if not _module_name(path).startswith(EDGES) and _module_name(path) != "loaderfactory"
    }
    assert {module: names for module, names in offenders.items() if names} == {}
