"""Users' type checkers see loaderfactory's annotations: the package ships ``py.typed``."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

USER_SCRIPT = """
import loaderfactory
from loaderfactory import Loader, build_loader

loader: Loader = build_loader({"dataset": {"kind": "synthetic"}})
state: dict[str, object] = loader.state_dict()
batches: int = len(loader)
"""


@pytest.mark.slow
@pytest.mark.timeout(600)  # 35 s with 2 cores at a load of 7 (136 s with torch analysed)
def test_mypy_checks_a_user_script_against_the_package(tmp_path: Path) -> None:
    """A correct script passes ``mypy --strict``; a wrong type is caught, so nothing is ``Any``."""
    good = tmp_path / "good.py"
    good.write_text(USER_SCRIPT)
    bad = tmp_path / "bad.py"
    bad.write_text(USER_SCRIPT + "wrong: str = loaderfactory.build_loader({})\n")
    # Analysing torch is three quarters of mypy's time and checks nothing of ours: a user's script
    # sees our annotations (a Loader is no str) just the same with torch's modules skipped.
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n\n[mypy-torch.*]\nfollow_imports = skip\n")
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--no-incremental",
        "--config-file",
        str(config),
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    # One run for both scripts: most of mypy's time goes to analysing torch, which they share.
    done = subprocess.run(
        [*command, str(good), str(bad)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stdout
    assert 'Incompatible types in assignment (expression has type "Loader", variable has type "str")' in (
        done.stdout
    )
    assert "good.py" not in done.stdout and "Found 1 error in 1 file" in done.stdout, done.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)  # the build's own limit is 300 s
def test_the_wheel_ships_py_typed_and_the_configs(tmp_path: Path) -> None:
    """The built wheel holds the ``py.typed`` marker and the namespaced configs."""
    command = [
        sys.executable,
        "-m",
        "build",
        "--wheel",
        "--no-isolation",
        "--outdir",
        str(tmp_path),
        str(ROOT),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("loaderfactory-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "loaderfactory/py.typed" in names
    assert "loaderfactory/conf/loaderfactory/cli.yaml" in names
    assert "loaderfactory/conf/loaderfactory/loader/torch.yaml" in names
