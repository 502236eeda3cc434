"""Real two-process gloo runs of ``examples/train_ddp.py`` under torchrun (sharded and torch kinds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _train_two_ranks(tmp_path: Path, *args: str) -> tuple[list[dict[str, Any]], str]:
    """Runs ``examples/train_ddp.py ARGS`` under torchrun with 2 ranks; returns both records and stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(ROOT / "examples" / "train_ddp.py"), "--epochs=2", "--batch-size=16", "--workers=1",
        f"--record={tmp_path}", *args,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in records] == [2, 2]
    return records, done.stdout


@pytest.mark.slow
def test_two_ranks_train_on_disjoint_covering_shards(tmp_path: Path) -> None:
    """Both ranks finish every all-reduce and see disjoint halves covering the data, reshuffled per epoch."""
    records, stdout = _train_two_ranks(tmp_path, "--length=200")
    for epoch in (0, 1):
        first, second = (r["epochs"][epoch] for r in records)
        assert len(first) == len(second) == 100
        assert set(first).isdisjoint(second)
        assert sorted(first + second) == list(range(200))
    assert records[0]["epochs"][0] != records[0]["epochs"][1]
    assert "epoch 1: 7 steps per rank" in stdout


@pytest.mark.slow
def test_torch_kind_splits_the_data_between_two_ranks(tmp_path: Path) -> None:
    """Each rank of ``train_ddp.py --loader torch_workers`` loads its own half, reshuffled per epoch."""
    records, stdout = _train_two_ranks(tmp_path, "--length=201", "--loader=torch_workers")
    for epoch in (0, 1):
        first, second = (r["epochs"][epoch] for r in records)
        assert len(first) == len(second) == 101  # 201 items padded to 202: equal steps per rank
        assert len(set(first) & set(second)) == 1  # only the one wrapped-around item is shared
        assert set(first) | set(second) == set(range(201))
    assert records[0]["epochs"][0] != records[0]["epochs"][1]
    assert "epoch 1: 7 steps per rank" in stdout
