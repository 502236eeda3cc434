"""``loaderfactory.components.sharded``, the former name of ``components/steps/``, still imports."""

from __future__ import annotations

import importlib
import sys

import pytest

import loaderfactory.components
from loaderfactory.components import steps
from loaderfactory.components.steps import loader, sampling

OLD = "loaderfactory.components.sharded"


@pytest.fixture
def never_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old package as if no test had imported it yet (so importing it runs it again)."""
    for name in [name for name in sys.modules if name == OLD or name.startswith(f"{OLD}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(loaderfactory.components, "sharded", raising=False)


@pytest.mark.usefixtures("never_imported")
@pytest.mark.parametrize(
    ("old", "new"), [(OLD, steps), (f"{OLD}.loader", loader), (f"{OLD}.sampling", sampling)]
)
def test_the_old_import_path_warns_and_gives_the_same_objects(old: str, new: object) -> None:
    """Importing the package or one of its modules by the old name warns, naming the new path, and
    gives the new module's very classes."""
    with pytest.warns(DeprecationWarning, match=r"import from loaderfactory\.components\.steps"):
        module = importlib.import_module(old)
    name = "ShardPlanner" if new is sampling else "ShardedDataLoader"
    assert getattr(module, name) is getattr(new, name)


@pytest.mark.usefixtures("never_imported")
def test_from_the_old_package_imports_the_new_loader() -> None:
    """``from loaderfactory.components.sharded import ShardedDataLoader`` is the new class."""
    with pytest.warns(DeprecationWarning, match="deprecated"):
        from loaderfactory.components.sharded import ShardedDataLoader
    assert ShardedDataLoader is loader.ShardedDataLoader
