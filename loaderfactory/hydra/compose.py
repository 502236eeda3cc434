"""Where the packaged configs live, and composing them from Python with Hydra's compose API."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig

PACKAGE = Path(__file__).resolve().parent.parent


NAMESPACE = "loaderfactory"
"""The one folder our configs add to Hydra's search path: apps compose ``/loaderfactory/<slot>``."""
CLI_CONFIG = "cli"
"""The ``loaderfactory`` command's root config, ``<config_dir>/loaderfactory/cli.yaml``."""
CONFIGS_GROUP = "loaderfactory.configs"
"""Entry-point group of installed plugins' config folders: ``sine = "loaderfactory_sine:conf"``."""


def config_dir() -> Path:
    """The folder to put on Hydra's search path: it holds only ``loaderfactory/`` (one group per slot).

    In an installed wheel it is ``loaderfactory/conf``; in a source checkout (or an editable
    install) it is the repository's top-level ``conf/``.
    """
    for candidate in (PACKAGE / "conf", PACKAGE.parent / "conf"):
        if (candidate / NAMESPACE / f"{CLI_CONFIG}.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"loaderfactory's configs are missing (looked in {PACKAGE / 'conf'} and {PACKAGE.parent / 'conf'}); "
        "reinstall the package"
    )


def cli_config_dir() -> Path:
    """The command's own config folder: the slots' groups at its top, so ``loader=torch_workers`` works."""
    return config_dir() / NAMESPACE


def plugin_config_dirs() -> list[Path]:
    """Installed plugins' config folders, each holding only ``loaderfactory/<slot>/<preset>.yaml``.

    Each entry point of the group ``loaderfactory.configs`` says ``"<package>:<folder in the package>"``.
    The package is found, not imported, so ``--help`` and ``run.mode=validate`` stay fast. The
    search-path plugin puts these folders after ours, so a preset of ours wins over a plugin's of the
    same name.

    Raises:
        FileNotFoundError: an entry point's package or folder is missing (the error names the entry point).
        ValueError: an entry point is not ``package:folder``, or its folder holds configs outside
            ``loaderfactory/`` (every Hydra app would see them as its own).
    """
    found: list[Path] = []
    for point in sorted(importlib.metadata.entry_points(group=CONFIGS_GROUP), key=lambda p: p.name):
        folder = _plugin_config_dir(point)
        if folder not in found:  # one distribution seen twice on sys.path
            found.append(folder)
    return found


def _plugin_config_dir(point: importlib.metadata.EntryPoint) -> Path:
    where = (
        f"loaderfactory plugin {point.name!r} (entry point {CONFIGS_GROUP}: {point.name} = {point.value!r})"
    )
    package, colon, relative = (part.strip() for part in point.value.partition(":"))
    if not (colon and package and relative) or Path(relative).is_absolute():
        raise ValueError(f"{where}: expected '<package>:<folder in the package>', such as 'my_plugin:conf'")
    try:
        spec = importlib.util.find_spec(package)  # imports a dotted name's parents only
    except (ImportError, ValueError) as err:
        raise FileNotFoundError(f"{where}: cannot find package {package!r}: {err}") from err
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError(f"{where}: {package!r} is not an installed package; reinstall the plugin")
    folder = next((Path(loc) / relative for loc in locations if (Path(loc) / relative).is_dir()), None)
    if folder is None:
        looked = ", ".join(str(Path(loc) / relative) for loc in locations)
        raise FileNotFoundError(
            f"{where}: its config folder is missing (looked in {looked}); "
            "reinstall the plugin, or fix the folder its entry point names"
        )
    if not (folder / NAMESPACE).is_dir():
        raise FileNotFoundError(
            f"{where}: {folder} has no {NAMESPACE}/ folder; presets go in "
            f"{folder / NAMESPACE}/<slot>/<preset>.yaml"
        )
    # What Hydra's file source lists: every folder (groups) and every *.yaml (configs).
    stray = sorted(
        entry.name
        for entry in folder.iterdir()
        if entry.name not in (NAMESPACE, "__pycache__")
        and (entry.is_dir() or (entry.is_file() and entry.suffix == ".yaml"))
    )
    if stray:
        raise ValueError(
            f"{where}: {folder} must hold only {NAMESPACE}/, or every Hydra app sees "
            f"{', '.join(stray)} as its own configs; move them into {folder / NAMESPACE}"
        )
    return folder.resolve()


def compose(overrides: Sequence[str] = (), config_name: str = CLI_CONFIG) -> DictConfig:
    """Compose the command's config with command-line style ``overrides``, for scripts and notebooks.

    Installed plugins' presets are there too (the search-path plugin adds their folders), as on
    the command line.

    >>> cfg = compose(["prefetch.buffer_size=8", "~prefetch"])  # doctest: +SKIP
    """
    with initialize_config_dir(config_dir=str(cli_config_dir()), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))
