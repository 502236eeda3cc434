"""Hydra search-path plugin: makes loaderfactory's config groups composable from any Hydra app.

It appends one folder whose only entry is ``loaderfactory/``: apps compose
``/loaderfactory/loader@data.loader: torch`` and so on, and nothing is added to their own root
configs or groups (a ``dataset`` group of theirs stays theirs). Installed plugins' config folders
(entry-point group ``loaderfactory.configs``) follow ours, namespaced the same way; the
``loaderfactory`` command (and ``loaderfactory.compose``) gets their ``loaderfactory/`` folders at
its root instead, so ``loaderfactory dataset=sine`` needs no ``--config-dir``.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class LoaderFactorySearchPathPlugin(SearchPathPlugin):
    """Appends the packaged ``conf`` folder (``loaderfactory/<slot>/<preset>.yaml``), then plugins'."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from loaderfactory.hydra.compose import NAMESPACE, cli_config_dir, config_dir, plugin_config_dirs

        ours = {f"file://{cli_config_dir()}", str(cli_config_dir())}
        if any(element.path in ours for element in search_path.get_path()):
            # The loaderfactory command itself: its groups are at its root already, so plugins' are too.
            for folder in plugin_config_dirs():
                search_path.append(provider="loaderfactory-plugin", path=f"file://{folder / NAMESPACE}")
            return
        search_path.append(provider="loaderfactory", path=f"file://{config_dir()}")
        for folder in plugin_config_dirs():
            search_path.append(provider="loaderfactory-plugin", path=f"file://{folder}")
