"""The README says what the code does: its reference table and its commands stay true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from loaderfactory.config.reference import reference

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
REFERENCE = (ROOT / "docs" / "reference.md").read_text()


def test_config_reference_matches_the_specs() -> None:
    """docs/reference.md is exactly what the registered specs generate, and the README links to it."""
    assert reference() + "\n" == REFERENCE, (
        "regenerate it: python -m loaderfactory.config.reference > docs/reference.md"
    )
    assert "(docs/reference.md)" in README


def test_every_registered_kind_is_in_the_reference() -> None:
    """Each registered kind has a section, so a new kind cannot ship undocumented."""
    from loaderfactory.config import registry

    for table in registry.TABLES:
        for kind in registry.available(table):
            assert f"#### {table}: `{kind}`" in REFERENCE


def test_ci_runs_the_readme_test_command() -> None:
    """`.ci/run` runs the README's test command verbatim."""
    commands = re.findall(r"```bash\n(pip install torch==2\.13\.0 [^\n]*pytest[^\n]*)\n```", README)
    assert len(commands) == 1
    assert commands[0] in (ROOT / ".ci/run").read_text()


def test_readme_install_command_pins_the_cpu_torch_first() -> None:
    """Both README commands install torch==2.13.0 before the package (never the CUDA build)."""
    commands = [c for c in re.findall(r"```bash\n([^\n]+)\n```", README) if "pip install" in c]
    assert len(commands) == 2
    for command in commands:
        assert command.startswith("pip install torch==2.13.0 && ")


def test_the_first_screens_example_runs() -> None:
    """The README's first Python example (a user's own data in a loader) runs as printed."""
    example = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)[0]
    assert "build_loader" in example and "dataset=dataset" in example
    check = "\nassert len(loader) == 16 and epoch == 1 and x.shape == (40, 3, 32, 32) and y.shape == (40,)\n"
    command = [sys.executable, "-c", example + check]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
