"""The data module for the ``lightning`` package (``import lightning as L``)."""

from __future__ import annotations

from loaderfactory.lightning._packages import missing_package

try:
    import lightning.pytorch as lightning_pytorch
except ImportError as err:  # the extra is optional; say how to get it
    raise missing_package("LoaderDataModule", err) from err

from loaderfactory.lightning._core import DataModuleCore


class LoaderDataModule(DataModuleCore, lightning_pytorch.LightningDataModule):
    __doc__ = DataModuleCore.__doc__
