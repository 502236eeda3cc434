"""Where the packaged configs live, and composing them from Python with Hydra's compose API."""

from __future__ import annotations

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


def compose(overrides: Sequence[str] = (), config_name: str = CLI_CONFIG) -> DictConfig:
    """Compose the command's config with command-line style ``overrides``, for scripts and notebooks.

    >>> cfg = compose(["prefetch.buffer_size=8", "~prefetch"])  # doctest: +SKIP
    """
    with initialize_config_dir(config_dir=str(cli_config_dir()), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))
