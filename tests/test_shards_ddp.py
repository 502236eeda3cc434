"""The shards kind across real gloo process groups: rank 0 alone lists the shards and reads the
index, ranks' parts are disjoint and cover the data, and a state saved at 2 ranks resumes at 3.

Each test runs ``tests/shards_ddp_scenarios.py`` under torchrun for the ``torch`` and ``sharded``
kinds over tar shards of uneven sizes, and counts sample ids.
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
from shards_data import write_tar_shards

from loaderfactory.shards import Storage, build_index, index_url, save_index

ROOT = Path(__file__).resolve().parent.parent
COUNTS = [9, 4, 11, 7, 6, 10, 5]
TOTAL = sum(COUNTS)
KINDS = ("torch", "sharded")


def _run(scenario: str, world_size: int, out: Path, data: Path, *args: str) -> list[dict[str, Any]]:
    """Runs one scenario on ``world_size`` gloo ranks; returns each rank's record."""
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
        str(ROOT / "tests" / "shards_ddp_scenarios.py"), scenario, str(out), str(data), *args,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [
        json.loads((out / f"{scenario}-w{world_size}-rank{r}.json").read_text()) for r in range(world_size)
    ]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """Tar shards with their index beside them."""
    urls = write_tar_shards(tmp_path / "data", COUNTS)
    storage = Storage()
    save_index(build_index(urls, storage, progress=False), index_url(urls), storage)
    return tmp_path / "data"


@pytest.mark.slow
def test_only_rank_0_reads_the_index_and_parts_cover_the_data(tmp_path: Path, data: Path) -> None:
    """Rank 0 lists the shards and reads the index once; rank 1 neither lists nor reads, yet both
    agree: per epoch their parts are disjoint and cover every sample."""
    records = _run("parts", 2, tmp_path, data)
    for kind in KINDS:
        assert records[0][kind]["calls"] == {"list": 1, "read index": 1}, kind
        assert records[1][kind]["calls"] == {}, kind
        for epoch in (0, 1):
            first, second = (r[kind]["epochs"][epoch] for r in records)
            assert Counter(first + second) == Counter(range(TOTAL)), (kind, epoch)
        assert records[0][kind]["epochs"][0] != records[0][kind]["epochs"][1], kind


@pytest.mark.slow
def test_state_saved_at_two_ranks_resumes_at_three(tmp_path: Path, data: Path) -> None:
    """Saved at world size 2 after 3 steps, resumed at 3: every remaining sample arrives exactly once."""
    saved = _run("save", 2, tmp_path, data, "--steps=3")
    resumed = _run("resume", 3, tmp_path, data)
    for kind in KINDS:
        head = [i for record in saved for i in record[kind]["head"]]
        rest = [i for record in resumed for i in record[kind]["rest"]]
        assert len(head) == 3 * 2 * 4, kind
        assert Counter(head + rest) == Counter(range(TOTAL)), kind


@pytest.mark.slow
def test_a_failure_on_rank_0_fails_every_rank_instead_of_hanging(tmp_path: Path, data: Path) -> None:
    """Shards that are not there: rank 0 reports the folder, the other rank hears of it and fails too."""
    records = _run("missing", 2, tmp_path, data)
    for kind in KINDS:
        assert "dataset.urls: " in records[0][kind]["error"] and "nowhere" in records[0][kind]["error"]
        assert "reading the shards index failed on rank 0: FileNotFoundError" in records[1][kind]["error"]
