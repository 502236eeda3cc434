"""The ``torch`` loader kind under a real two-process gloo group: disjoint, covering, equal steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_torch_kind_splits_the_data_between_two_ranks(tmp_path: Path) -> None:
    """Each rank of ``train_ddp.py --loader torch_workers`` loads its own half, reshuffled per epoch."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(ROOT / "examples" / "train_ddp.py"), "--loader=torch_workers",
        "--epochs=2", "--length=201", "--batch-size=16", "--workers=1", f"--record={tmp_path}",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in records] == [2, 2]
    for epoch in (0, 1):
        first, second = (r["epochs"][epoch] for r in records)
        assert len(first) == len(second) == 101  # 201 items padded to 202: equal steps per rank
        assert len(set(first) & set(second)) == 1  # only the one wrapped-around item is shared
        assert set(first) | set(second) == set(range(201))
    assert records[0]["epochs"][0] != records[0]["epochs"][1]
    assert "epoch 1: 7 steps per rank" in done.stdout


def test_torch_kind_reads_torchruns_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a process group, RANK and WORLD_SIZE (torchrun's) split the data; ``off`` reads it all."""
    import loaderfactory

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    config = {"loader": {"kind": "torch", "batch_size": 2, "shuffle": True}, "seed": 4}
    with loaderfactory.build_loader(config, dataset=list(range(9))) as loader:
        mine = [int(i) for batch in loader for i in batch]
    with loaderfactory.build_loader(
        {**config, "loader": {**config["loader"], "distributed": "off"}}, dataset=list(range(9))
    ) as loader:
        everything = [int(i) for batch in loader for i in batch]
    assert len(mine) == 3 and sorted(everything) == list(range(9))
    assert mine == everything[1::3]
