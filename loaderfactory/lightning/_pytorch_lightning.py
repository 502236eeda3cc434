"""The data module for the ``pytorch_lightning`` package (``import pytorch_lightning as pl``)."""

from __future__ import annotations

try:
    import pytorch_lightning
except ImportError as err:  # the extra is optional; say how to get it
    raise ImportError(
        f"loaderfactory.lightning.PLLoaderDataModule needs the pytorch_lightning package ({err}); "
        "install it with pip install pytorch-lightning, or, with lightning, use LoaderDataModule"
    ) from err

from loaderfactory.lightning._core import DataModuleCore


class PLLoaderDataModule(DataModuleCore, pytorch_lightning.LightningDataModule):
    __doc__ = DataModuleCore.__doc__
    lightning_base = pytorch_lightning.LightningDataModule
