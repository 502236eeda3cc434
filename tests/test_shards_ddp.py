"""The shards kind across real gloo process groups: rank 0 alone lists the shards and reads the
index, ranks' parts are disjoint and cover the data, 4 ranks get equal steps under ``balance: pad``
and ``drop``, and a state saved at 2 ranks resumes at 3, one saved at 4 ranks at 2.

Each test runs ``tests/shards_ddp_scenarios.py`` under torchrun for the ``torch`` and ``sharded``
kinds over tar shards of uneven sizes, and counts sample ids. The 4-rank checks share two torchrun
runs (a module fixture): starting a process group of 4 costs seconds.
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
COUNTS_4 = [9, 4, 11, 7, 6, 10, 5, 3]
"""55 samples in 8 uneven shards: 4 ranks divide neither the samples nor the shards' lengths."""
TOTAL_4 = sum(COUNTS_4)
STEPS_4 = 2
"""Batches each of the 4 ranks takes before its state is saved."""


def _run(scenarios: str, world_size: int, out: Path, data: Path, *args: str) -> list[dict[str, Any]]:
    """Runs the scenarios (comma-separated) on ``world_size`` gloo ranks; returns each rank's record
    of the last one."""
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
        str(ROOT / "tests" / "shards_ddp_scenarios.py"), scenarios, str(out), str(data), *args,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return _records(scenarios.split(",")[-1], world_size, out)


def _records(scenario: str, world_size: int, out: Path) -> list[dict[str, Any]]:
    return [
        json.loads((out / f"{scenario}-w{world_size}-rank{r}.json").read_text()) for r in range(world_size)
    ]


def _indexed_shards(folder: Path, counts: list[int]) -> Path:
    """Tar shards with their index beside them."""
    urls = write_tar_shards(folder, counts)
    storage = Storage()
    save_index(build_index(urls, storage, progress=False), index_url(urls), storage)
    return folder


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return _indexed_shards(tmp_path / "data", COUNTS)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """One torchrun at 4 ranks (``balanced``, then ``save`` with 0 and 2 workers), one at 2 ranks
    (``resume``: the state saved with 0 workers loaded with 2, and the other way round)."""
    out = tmp_path_factory.mktemp("four_ranks")
    data = _indexed_shards(out / "data", COUNTS_4)
    _run("balanced,save", 4, out, data, f"--steps={STEPS_4}", "--workers=0,2")
    resumed = _run("resume", 2, out, data, "--workers=2,0", "--saved-workers=0,2")
    return {"balanced": _records("balanced", 4, out), "save": _records("save", 4, out), "resume": resumed}


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
        head = [i for record in saved for i in record[kind]["0"]["head"]]
        rest = [i for record in resumed for i in record[kind]["0->0"]["rest"]]
        assert len(head) == 3 * 2 * 4, kind
        assert Counter(head + rest) == Counter(range(TOTAL)), kind


@pytest.mark.slow
def test_a_failure_on_rank_0_fails_every_rank_instead_of_hanging(tmp_path: Path, data: Path) -> None:
    """Shards that are not there: rank 0 reports the folder, the other rank hears of it and fails too."""
    records = _run("missing", 2, tmp_path, data)
    for kind in KINDS:
        assert "dataset.urls: " in records[0][kind]["error"] and "nowhere" in records[0][kind]["error"]
        assert "reading the shards index failed on rank 0: ShardNotFoundError" in records[1][kind]["error"]


@pytest.mark.slow
@pytest.mark.parametrize("balance", ["pad", "drop"])
def test_four_ranks_take_equal_steps_over_shards_that_do_not_divide(
    four_ranks: dict[str, list[dict[str, Any]]], balance: str
) -> None:
    """55 samples on 4 ranks: every rank takes the same steps (``len()`` says so); ``drop`` gives
    disjoint parts short of the 3 samples left over, ``pad`` covers every sample and repeats one."""
    for kind in KINDS:
        parts = [record[kind][balance] for record in four_ranks["balanced"]]
        assert len({part["steps"] for part in parts}) == 1, (kind, [part["steps"] for part in parts])
        assert all(part["len"] == part["steps"] for part in parts), kind
        ids = Counter(i for part in parts for i in part["ids"])
        if balance == "drop":
            assert set(ids) <= set(range(TOTAL_4)) and max(ids.values()) == 1, kind
            assert sum(ids.values()) == TOTAL_4 - TOTAL_4 % 4, kind
        else:
            assert set(ids) == set(range(TOTAL_4)) and sum(ids.values()) == TOTAL_4 + 1, kind


@pytest.mark.slow
@pytest.mark.parametrize(("saved", "loaded"), [(0, 2), (2, 0)])
def test_a_state_saved_at_four_ranks_resumes_at_two_with_every_remaining_id_once(
    four_ranks: dict[str, list[dict[str, Any]]], saved: int, loaded: int
) -> None:
    """Saved mid-epoch at 4 ranks (with 0 or 2 workers), resumed at 2 (with the other count): the
    samples before and after, counted over every rank, are the epoch's, each exactly once."""
    for kind in KINDS:
        head = [i for record in four_ranks["save"] for i in record[kind][str(saved)]["head"]]
        rest = [i for record in four_ranks["resume"] for i in record[kind][f"{saved}->{loaded}"]["rest"]]
        assert len(head) == STEPS_4 * 4 * 4, kind
        assert Counter(head + rest) == Counter(range(TOTAL_4)), kind
