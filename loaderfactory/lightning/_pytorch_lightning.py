"""The data module for the ``pytorch_lightning`` package (``import pytorch_lightning as pl``)."""

from __future__ import annotations

from loaderfactory.lightning._packages import missing_package

try:
    import pytorch_lightning
except ImportError as err:  # the extra is optional; say how to get it
    raise missing_package("PLLoaderDataModule", err) from err

from loaderfactory.lightning._core import DataModuleCore


class PLLoaderDataModule(DataModuleCore, pytorch_lightning.LightningDataModule):
    __doc__ = DataModuleCore.__doc__
