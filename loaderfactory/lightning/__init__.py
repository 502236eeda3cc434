"""PyTorch Lightning: ``LightningDataModule``s whose loaders come from loaderfactory configs.

Lightning's trainer takes only data modules of its own package, so there is one class per package,
both with the same behaviour (:class:`~loaderfactory.lightning._core.DataModuleCore`):

* ``LoaderDataModule`` for ``lightning`` (``import lightning as L``; the lightning-hydra-template and
  Lightning's docs), installed by the ``lightning`` extra: ``pip install "loaderfactory[lightning]"``;
* ``PLLoaderDataModule`` for ``pytorch_lightning`` (``import pytorch_lightning as pl``).

Each loads its package on first use, so either works without the other installed, and
``import loaderfactory`` never loads Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loaderfactory.lazy_names import lazy_exports

__all__ = ["LoaderDataModule", "PLLoaderDataModule"]

_EXPORTS = {
    "LoaderDataModule": "loaderfactory.lightning._lightning",
    "PLLoaderDataModule": "loaderfactory.lightning._pytorch_lightning",
}

if TYPE_CHECKING:
    from loaderfactory.lightning._lightning import LoaderDataModule
    from loaderfactory.lightning._pytorch_lightning import PLLoaderDataModule


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
