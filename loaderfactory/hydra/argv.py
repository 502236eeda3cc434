"""What the command does to its command line before Hydra reads it."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from loaderfactory.config import registry

_LIGHT_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "--resolve")
_LIGHT_MODES = ("run.mode=validate", "run.mode=plan", "run.mode=schema")
_NO_OUTPUT = ("hydra.output_subdir=null", "hydra/job_logging=none", "hydra/hydra_logging=none")
_VALUE_OVERRIDE = re.compile(r"^(?P<key>[A-Za-z_][\w-]*(?:\.[\w-]+)*)=")
"""``key.path=value`` with no ``+``/``++``/``~`` prefix, no ``/`` (a group) and no ``@`` (a package)."""

_OTHER_CONFIG = ("--config-name", "-cn", "--config-dir", "-cd", "--config-path", "-cp")
OPENED = "++"
"""The prefix :func:`open_config_keys` adds: Hydra's "add or override"."""


def light_overrides(argv: Sequence[str]) -> list[str]:
    """Overrides that keep a look-only invocation (``--help``, ``validate``, ``schema``) from writing
    an output folder or a log file; none for a run or a sweep."""
    if "-m" in argv or "--multirun" in argv:
        return []
    if not any(a in _LIGHT_FLAGS or a.split("=", 1)[0] in _LIGHT_FLAGS for a in argv) and not any(
        _closed(a) in _LIGHT_MODES for a in argv
    ):
        return []
    found = list(_NO_OUTPUT)
    if not any(a.startswith("hydra.run.dir=") for a in argv):
        found.append("hydra.run.dir=.")  # the current folder: it exists, nothing is created
    return found


def with_light_overrides(argv: Sequence[str]) -> list[str]:
    """``argv`` with :func:`light_overrides` next to the overrides already there.

    Hydra's argument parser takes the overrides as one run of positional arguments, so
    ``dataset=sine --cfg job`` followed by more overrides would be refused: they go right after
    the last override given (at the end when there is none).
    """
    extra = light_overrides(argv)
    given = [i for i, item in enumerate(argv) if item[:1] != "-" and ("=" in item or item[:1] == "~")]
    at = given[-1] + 1 if given else len(argv)
    return [*argv[:at], *extra, *argv[at:]]


def open_config_keys(overrides: Sequence[str]) -> list[str]:
    """``overrides`` with each plain ``key=value`` outside ``hydra.`` turned into ``++key=value``.

    Hydra composes in struct mode, so ``loader.batch_sise=4`` would stop at Hydra's "Key
    'batch_sise' is not in struct", naming only that mistake. ``++`` sets an existing key exactly
    as ``=`` does and adds a new one, which validation then reports with the closest field name,
    together with every other problem of the config. A slot's name alone (``loader=torch``) picks
    a preset and is left as it is; so are ``hydra.*`` keys, which Hydra checks itself, and every
    override when the command line names another root config (its groups are not known here).
    """
    if any(item.split("=", 1)[0] in _OTHER_CONFIG for item in overrides):
        return list(overrides)  # another root config may have groups of its own: `experiment=fast`
    return [_opened(item) for item in overrides]


def _opened(item: str) -> str:
    found = _VALUE_OVERRIDE.match(item)
    if found is None:
        return item
    key = found["key"]
    if key.split(".", 1)[0] == "hydra" or key in registry.SLOTS:
        return item
    return OPENED + item


def _closed(item: str) -> str:
    """An override as the user typed it (without the ``++`` that :func:`open_config_keys` added)."""
    return item[len(OPENED) :] if item.startswith(OPENED) else item


def shown_overrides(overrides: Sequence[str], typed: Sequence[str]) -> list[str]:
    """A job's ``overrides`` (Hydra's record) as the user wrote them in ``typed``: without the ``++``
    that :func:`open_config_keys` added."""
    opened = {_key(item) for item in typed if _opened(item) != item}
    return [_closed(item) if _key(_closed(item)) in opened else item for item in overrides]


def _key(item: str) -> str:
    return item.split("=", 1)[0]


def put_cwd_on_path() -> None:
    """Put the current folder first on ``sys.path``, as ``python -m`` does, so a ``_target_`` in a
    module beside the user's config imports from the installed ``loaderfactory`` script too."""
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)
