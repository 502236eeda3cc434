"""What the Lightning tests share: a quiet one-CPU ``Trainer`` of either package, and what loads Lightning."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def quiet_trainer(package: Any, root: Path, checkpoints: bool = False, **options: Any) -> Any:
    """``package.Trainer`` on one CPU under ``root``: no logger, progress bar, model summary or sanity
    validation; checkpoints only when asked for; ``options`` (``max_steps``, callbacks...) on top."""
    return package.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=checkpoints,
        default_root_dir=root,
        num_sanity_val_steps=0,
        **options,
    )


LIGHTNING_IMPORTS = """
import json, sys, loaderfactory
def top():
    return sorted({m.split(".")[0] for m in sys.modules if "lightning" in m.split(".")[0]})
loaderfactory.build_loader({"dataset": {"kind": "synthetic", "length": 2}}).close()
with_a_loader = sorted(m for m in sys.modules if "lightning" in m)
import loaderfactory.lightning as lfl
with_the_module = top()
lfl.PLLoaderDataModule
print(json.dumps({"loader": with_a_loader, "module": with_the_module, "pl_class": top()}))
"""


@functools.cache
def lightning_imports() -> dict[str, list[str]]:
    """In a fresh interpreter, the Lightning modules loaded after building a loader (``loader``), then
    after importing ``loaderfactory.lightning`` (``module``, top-level packages), then after naming
    its ``PLLoaderDataModule`` (``pl_class``). One interpreter, shared by the tests that read it."""
    result = subprocess.run(
        [sys.executable, "-c", LIGHTNING_IMPORTS], capture_output=True, text=True, check=True, timeout=240
    )
    imports: dict[str, list[str]] = json.loads(result.stdout.strip().splitlines()[-1])
    return imports


def installed(package: str) -> bool:
    """Whether ``package`` imports here (each Lightning package is optional)."""
    try:
        __import__(package)
    except ImportError:
        return False
    return True
