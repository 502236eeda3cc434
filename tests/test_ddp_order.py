"""The one order across real gloo process groups: no seed, rank 0's state on every rank, elastic resume.

Each test runs ``tests/ddp_scenarios.py`` under torchrun for the ``torch`` and ``sharded`` kinds
(103 items, batches of 4, ``balance: uneven`` so that every count is exact) and counts sample ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
LENGTH = 103
KINDS = ("torch", "sharded")


def _run(scenario: str, world_size: int, out: Path, *args: str) -> list[dict[str, Any]]:
    """Runs one scenario on ``world_size`` gloo ranks; returns each rank's record."""
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
        str(ROOT / "tests" / "ddp_scenarios.py"), scenario, str(out), *args,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [
        json.loads((out / f"{scenario}-w{world_size}-rank{r}.json").read_text()) for r in range(world_size)
    ]


@pytest.mark.slow
def test_no_seed_anywhere_gives_disjoint_covering_parts(tmp_path: Path) -> None:
    """Without any seed, ranks agree on one order: their parts are disjoint and cover the data, per epoch."""
    records = _run("noseed", 2, tmp_path)
    for kind in KINDS:
        for epoch in (0, 1):
            first, second = (r[kind]["epochs"][epoch] for r in records)
            assert sorted(first + second) == list(range(LENGTH)), kind
        assert records[0][kind]["epochs"][0] != records[0][kind]["epochs"][1], kind


@pytest.mark.slow
def test_rank_0s_state_resumes_every_rank_exactly(tmp_path: Path) -> None:
    """Every rank loading rank 0's state yields exactly its own remaining batches, then the next epoch."""
    records = _run("rank0", 2, tmp_path, "--steps=5")
    for kind in KINDS:
        for record in records:
            assert record[kind]["got"] == record[kind]["expected"], kind
        heads = [r[kind]["head"] for r in records]
        assert set(heads[0]).isdisjoint(heads[1]), kind


@pytest.mark.slow
def test_state_saved_at_four_ranks_resumes_at_another_world_size(tmp_path: Path) -> None:
    """Saved at world size 4 after 3 steps, resumed at 2 and at 3: each remaining sample arrives
    exactly once."""
    state = tmp_path / "state"
    saved = _run("save", 4, tmp_path, f"--state={state}", "--steps=3")
    for world_size in (2, 3):
        resumed = _run("resume", world_size, tmp_path, f"--state={state}")
        for kind in KINDS:
            head = [i for record in saved for i in record[kind]["head"]]
            rest = [i for record in resumed for i in record[kind]["rest"]]
            assert len(head) == 3 * 4 * 4, kind
            assert Counter(head + rest) == Counter(range(LENGTH)), (kind, world_size)
            for record in resumed:  # len(): the 3 steps delivered, then this rank's part of the rest
                assert record[kind]["len"] == 3 + record[kind]["batches"], (kind, world_size)
