"""CONTRIBUTING.md's checks are CI's: the same commands, the same tool versions."""

from __future__ import annotations

import re
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the suite runs on 3.11+, where tomllib is standard
    pytest.skip("tomllib needs Python 3.11", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()
CHECK_TOOLS = ("ruff", "mypy")


def _check_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(CHECK_TOOLS)]


def test_contributing_lists_exactly_the_checks_ci_runs() -> None:
    """The ruff and mypy commands in CONTRIBUTING.md's first bash block after the set-up are
    ``.ci/run``'s, in the same order."""
    blocks = re.findall(r"```bash\n(.*?)```", CONTRIBUTING, flags=re.DOTALL)
    checks = [_check_lines(block) for block in blocks if _check_lines(block)]
    assert checks == [_check_lines((ROOT / ".ci/run").read_text())]


def test_the_test_extra_pins_the_checkers_to_the_installed_versions() -> None:
    """ruff and mypy are pinned with ``==`` in the ``test`` extra, to the versions installed here."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    names = [re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0] for requirement in extra]
    pins = {name: requirement.removeprefix(name) for name, requirement in zip(names, extra, strict=True)}
    assert {tool: pins[tool] for tool in CHECK_TOOLS} == {tool: f"=={version(tool)}" for tool in CHECK_TOOLS}


def _python_folders() -> list[str]:
    """Every folder of the package and of the Hydra plugin that holds Python modules."""
    roots = [ROOT / "loaderfactory", ROOT / "hydra_plugins"]
    folders = {path.parent for root in roots for path in root.rglob("*.py")}
    folders -= {ROOT / "hydra_plugins", ROOT / "loaderfactory"}  # the latter's modules have rows of their own
    return sorted(f"{folder.relative_to(ROOT)}/" for folder in folders)


def test_where_things_live_has_a_line_for_every_folder_and_top_level_module() -> None:
    """CONTRIBUTING.md's "Where things live" starts a table row with each Python folder, and names each
    module at the package's top in the first cell of a row."""
    folders = re.findall(r"^\| `([^`]+/)` \|", CONTRIBUTING, flags=re.MULTILINE)
    assert sorted(set(_python_folders()) - set(folders)) == []
    first_cells = " ".join(re.findall(r"^\| ([^|]*`[^|]*) \|", CONTRIBUTING, flags=re.MULTILINE))
    modules = sorted(path.name for path in (ROOT / "loaderfactory").glob("*.py"))
    assert [name for name in modules if f"{name}`" not in first_cells] == []


def _section(title: str) -> str:
    """The text of CONTRIBUTING.md's ``## <title>`` section."""
    return CONTRIBUTING.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_adding_a_dataset_kind_touches_at_most_six_files() -> None:
    """The guide's file table for a new dataset kind lists at most six files, and those not named
    after the kind exist."""
    files = re.findall(r"^\| `([^`]+)` \|", _section("Adding a dataset kind"), flags=re.MULTILINE)
    assert 0 < len(files) <= 6
    assert [name for name in files if "<kind>" not in name and not (ROOT / name).is_file()] == []


def test_kind_module_names_a_function_of_a_components_module() -> None:
    """``kind_module("data.<module>", name)``, as the guide registers a dataset kind's builder, calls
    ``loaderfactory.components.data.<module>.<name>``."""
    from loaderfactory.components.data.datasets import SyntheticDataset
    from loaderfactory.config.builtins import kind_module

    made = kind_module("data.datasets", "SyntheticDataset")(length=3)
    assert isinstance(made, SyntheticDataset) and len(made) == 3
