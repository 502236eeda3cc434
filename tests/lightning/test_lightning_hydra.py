"""The Lightning app in the template's shape (examples/lightning_hydra) runs as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "lightning_hydra" / "train.py"
STEPS = 16  # 64 items in batches of 8, two epochs


def train(folder: Path, *overrides: str, sweep: bool = False) -> str:
    """Runs the app with ``overrides`` (as a ``-m`` sweep when ``sweep``); returns its output."""
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    mode = ["-m", f"hydra.sweep.dir={folder}"] if sweep else [f"hydra.run.dir={folder}"]
    command = [sys.executable, str(APP), *mode, *overrides]
    done = subprocess.run(command, cwd=folder.parent, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def seen(folder: Path) -> list[list[int]]:
    return json.loads((folder / "seen.json").read_text())


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of an uninterrupted fit of two epochs (with checkpoints every 5 steps)."""
    folder = tmp_path_factory.mktemp("lightning_hydra") / "whole"
    assert f"trained {STEPS} steps of batch size 8" in train(folder)
    return folder


def test_the_app_fits_every_sample_once_an_epoch(whole: Path) -> None:
    """``train.py`` instantiates the data module from ``configs/data``; each epoch covers all 64 samples."""
    steps = seen(whole)
    assert len(steps) == STEPS and {len(batch) for batch in steps} == {8}
    for epoch in (steps[:8], steps[8:]):
        assert sorted(i for batch in epoch for i in batch) == list(range(64))
    assert steps[:8] != steps[8:]  # shuffled anew each epoch


def test_a_fit_resumed_from_a_mid_epoch_checkpoint_trains_on_exactly_the_rest(whole: Path) -> None:
    """``ckpt_path=`` the checkpoint of step 10 (mid second epoch): the new run trains on steps 11 to 16."""
    (checkpoint,) = (whole / "checkpoints").glob("*step=10.ckpt")
    resumed = whole.parent / "resumed"
    train(resumed, f"ckpt_path='{checkpoint}'", "test=false")
    assert seen(resumed) == seen(whole)[10:]


def test_a_sweep_over_the_data_modules_batch_size_trains_with_each(tmp_path: Path) -> None:
    """``-m data.batch_size=4,16`` (what the template's Optuna sweep sets) runs one fit per batch size."""
    out = train(tmp_path / "sweep", "data.batch_size=4,16", "trainer.max_epochs=1", "test=false", sweep=True)
    assert "trained 16 steps of batch size 4" in out and "trained 4 steps of batch size 16" in out
    for job, size in (("0", 4), ("1", 16)):
        steps = seen(tmp_path / "sweep" / job)
        assert {len(batch) for batch in steps} == {size}
        assert sorted(i for batch in steps for i in batch) == list(range(64))
