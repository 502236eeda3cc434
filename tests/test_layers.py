"""The layers stay apart at import time: runtime modules never load the config machinery."""

from __future__ import annotations

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


def _loaded_after_import(statement: str) -> list[str]:
    code = (
        f"import json, sys\n{statement}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {CONFIG_MACHINERY!r})))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("module", RUNTIME_MODULES)
def test_importing_a_runtime_module_loads_no_config_machinery(module: str) -> None:
    """A plain-Python user of a component pays for neither pydantic, Hydra nor OmegaConf."""
    assert _loaded_after_import(f"import {module}") == []


def test_public_components_from_the_package_load_no_config_machinery() -> None:
    """``from loaderfactory import ThreadBuffer`` stays light: the package resolves names lazily."""
    statement = (
        "from loaderfactory import Loader, QueueDataset, ShardedDataLoader, StallError, StreamWrapper, "
        "ThreadBuffer, ThreadDataLoader, WorkerError"
    )
    assert _loaded_after_import(statement) == []


def test_the_config_layer_loads_when_a_name_needs_it() -> None:
    """``validate`` brings pydantic; the lazy names resolve to the same objects as their modules."""
    assert "pydantic" in _loaded_after_import("from loaderfactory import validate")
    import loaderfactory
    from loaderfactory.intake import validate

    assert loaderfactory.validate is validate
    assert sorted(loaderfactory.__all__) == loaderfactory.__all__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        loaderfactory.nope  # noqa: B018 - the attribute access is the test
