"""A real two-process gloo run of ``examples/train_ddp.py`` under torchrun, spawned by the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_two_ranks_train_on_disjoint_covering_shards(tmp_path: Path) -> None:
    """Both ranks finish every all-reduce and see disjoint halves covering the data, reshuffled per epoch."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(ROOT / "examples" / "train_ddp.py"),
        "--epochs=2", "--length=200", "--batch-size=16", "--workers=1", f"--record={tmp_path}",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in records] == [2, 2]
    for epoch in (0, 1):
        first, second = (r["epochs"][epoch] for r in records)
        assert len(first) == len(second) == 100
        assert set(first).isdisjoint(second)
        assert sorted(first + second) == list(range(200))
    assert records[0]["epochs"][0] != records[0]["epochs"][1]
    assert "epoch 1: 7 steps per rank" in done.stdout
