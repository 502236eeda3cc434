"""A real 2-process gloo fit through Lightning (``Trainer(devices=2, strategy="ddp")``), both packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ITEMS, STEPS_PER_EPOCH, STOP = 24, 4, 6


def _fit_on_two_ranks(package: str, out: Path) -> list[dict[str, Any]]:
    """Runs tests/support/lightning_ddp_fit.py on 2 gloo ranks; returns each rank's record."""
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(ROOT / "tests/support/lightning_ddp_fit.py"), package, str(out),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((out / f"{package}-rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("package", ["lightning", "pytorch_lightning"])
def test_a_ddp_fit_splits_each_epoch_and_resumes_every_rank_from_rank_0s_checkpoint(
    package: str, tmp_path: Path
) -> None:
    """Seeded by ``seed_everything(42)`` alone, the ranks' parts of each epoch are disjoint and cover
    the data; a fit resumed from rank 0's mid-epoch checkpoint trains every rank on what it would have."""
    pytest.importorskip(package)
    ranks = _fit_on_two_ranks(package, tmp_path)
    for epoch in range(2):
        steps = slice(epoch * STEPS_PER_EPOCH, (epoch + 1) * STEPS_PER_EPOCH)
        parts = [[i for batch in rank["whole"][steps] for i in batch] for rank in ranks]
        assert sorted(parts[0] + parts[1]) == list(range(ITEMS))
    assert ranks[0]["whole"][:STEPS_PER_EPOCH] != ranks[0]["whole"][STEPS_PER_EPOCH:]  # a new shuffle
    for rank in ranks:
        assert len(rank["whole"]) == 2 * STEPS_PER_EPOCH
        assert rank["resumed"] == rank["whole"][STOP:]
