"""The data module for the ``lightning`` package (``import lightning as L``)."""

from __future__ import annotations

try:
    import lightning.pytorch as lightning_pytorch
except ImportError as err:  # the extra is optional; say how to get it
    raise ImportError(
        f"loaderfactory.lightning.LoaderDataModule needs the lightning package ({err}); install it with "
        'pip install "loaderfactory[lightning]", or, with pytorch_lightning, use PLLoaderDataModule'
    ) from err

from loaderfactory.lightning._core import DataModuleCore


class LoaderDataModule(DataModuleCore, lightning_pytorch.LightningDataModule):
    __doc__ = DataModuleCore.__doc__
    lightning_base = lightning_pytorch.LightningDataModule
