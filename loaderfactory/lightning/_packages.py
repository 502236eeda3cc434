"""The two Lightning packages, one data module class each, and the error when a class's is missing."""

from __future__ import annotations

PACKAGES = {
    "LoaderDataModule": ("lightning", 'pip install "loaderfactory[lightning]"'),
    "PLLoaderDataModule": ("pytorch_lightning", "pip install pytorch-lightning"),
}
"""Each data module class → the package whose ``LightningDataModule`` it extends, and how to install it."""


def missing_package(name: str, err: ImportError) -> ImportError:
    """The error for ``loaderfactory.lightning.<name>`` when its package does not import (``err``):
    how to install the package, or the class to use with the other one."""
    package, install = PACKAGES[name]
    other = next(other for other in PACKAGES if other != name)
    return ImportError(
        f"loaderfactory.lightning.{name} needs the {package} package ({err}); install it with {install}, "
        f"or, with {PACKAGES[other][0]}, use {other}"
    )
