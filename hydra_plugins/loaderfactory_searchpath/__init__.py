"""Hydra search-path plugin: makes loaderfactory's config groups composable from any Hydra app."""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class LoaderFactorySearchPathPlugin(SearchPathPlugin):
    """Appends the packaged ``conf`` folder so ``/loader: torch`` and friends resolve in user apps."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from loaderfactory.hydra.compose import config_dir

        search_path.append(provider="loaderfactory", path=f"file://{config_dir()}")
