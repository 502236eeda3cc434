"""The shards kind across real gloo process groups: rank 0 alone lists the shards and reads the
index, ranks' parts are disjoint and cover the data, 4 ranks get equal steps under ``balance: pad``
and ``drop``, and a state saved at 2 ranks resumes at 3, one saved at 4 ranks at 2.

Each test reads what ``tests/support/shards_ddp_scenarios.py`` recorded under torchrun for the ``torch`` and
``sharded`` kinds over tar shards of uneven sizes, and counts sample ids. Starting a process group
costs seconds, so every check shares three torchrun runs (a module fixture): 4 ranks, then 2, then 3.
"""

from __future__ import annotations

import bisect
import itertools
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
from loaderfactory.shards.order import window_order

ROOT = Path(__file__).resolve().parents[2]
COUNTS = [9, 4, 11, 7, 6, 10, 5]
TOTAL = sum(COUNTS)
KINDS = ("torch", "sharded")
COUNTS_4 = [9, 4, 11, 7, 6, 10, 5, 3]
"""55 samples in 8 uneven shards: 4 ranks divide neither the samples nor the shards' lengths."""
TOTAL_4 = sum(COUNTS_4)
ENDS_4 = list(itertools.accumulate(COUNTS_4))
STEPS_4 = 2
"""Batches each of the 4 ranks takes before its state is saved."""
SEED = 11
"""The seed ``tests/support/shards_ddp_scenarios.py`` builds its loaders with."""
Records = dict[str, list[dict[str, Any]]]


def _run(world_size: int, out: Path, *groups: list[str]) -> None:
    """Runs the groups of scenarios (each ``[SCENARIOS, DATA, OPTIONS...]``) one after the other in
    one process group of ``world_size`` gloo ranks, recording to ``out``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    separated = [arg for number, group in enumerate(groups) for arg in ["::"] * bool(number) + group]
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
        str(ROOT / "tests/support/shards_ddp_scenarios.py"), str(out), *separated,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _records(scenario: str, world_size: int, out: Path) -> list[dict[str, Any]]:
    return [
        json.loads((out / f"{scenario}-w{world_size}-rank{r}.json").read_text()) for r in range(world_size)
    ]


def _shard_number(url: str) -> int:
    """7 for ``.../train-000007.tar``."""
    return int(url.rsplit("-", 1)[1].split(".")[0])


def _indexed_shards(folder: Path, counts: list[int]) -> Path:
    """Tar shards with their index beside them."""
    urls = write_tar_shards(folder, counts)
    storage = Storage()
    save_index(build_index(urls, storage, progress=False), index_url(urls), storage)
    return folder


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Records:
    """Three torchrun runs; each scenario's records, by the names below:

    * 4 ranks over ``COUNTS_4``: ``balanced``, then ``save4`` after ``STEPS_4`` with 0 and 2 workers;
    * 2 ranks: ``resume2`` of those states with 2 and 0 workers; then over ``COUNTS``: ``parts``,
      ``save2`` after 3 steps (replacing the 0-worker state) and ``missing``;
    * 3 ranks over ``COUNTS``: ``resume3`` of the state saved at 2 ranks.
    """
    out = tmp_path_factory.mktemp("ranks")
    data_4, data = _indexed_shards(out / "data4", COUNTS_4), _indexed_shards(out / "data", COUNTS)
    _run(4, out, ["balanced,save", str(data_4), f"--steps={STEPS_4}", "--workers=0,2"])
    resume_4 = ["resume", str(data_4), "--workers=2,0", "--saved-workers=0,2"]
    _run(2, out, resume_4, ["parts,save,missing", str(data)])
    _run(3, out, ["resume", str(data)])
    names = {"balanced": ("balanced", 4), "save4": ("save", 4), "resume2": ("resume", 2)}
    names |= {"parts": ("parts", 2), "save2": ("save", 2), "missing": ("missing", 2)}
    names |= {"resume3": ("resume", 3)}
    return {name: _records(scenario, size, out) for name, (scenario, size) in names.items()}


@pytest.mark.slow
def test_only_rank_0_reads_the_index_and_parts_cover_the_data(ranks: Records) -> None:
    """Rank 0 lists the shards and reads the index once; rank 1 neither lists nor reads, yet both
    agree: per epoch their parts are disjoint, cover every sample, and interleave to the one
    window order that a single process reads."""
    records = ranks["parts"]
    for kind in KINDS:
        assert records[0][kind]["calls"] == {"list": 1, "read index": 1}, kind
        assert records[1][kind]["calls"] == {}, kind
        for epoch in (0, 1):
            first, second = (r[kind]["epochs"][epoch] for r in records)
            assert Counter(first + second) == Counter(range(TOTAL)), (kind, epoch)
            # the one global order, whatever the world size: rank r takes its every second sample
            order = window_order(COUNTS, SEED, epoch, 2).tolist()
            assert [first, second] == [order[0::2], order[1::2]], (kind, epoch)
        assert records[0][kind]["epochs"][0] != records[0][kind]["epochs"][1], kind


@pytest.mark.slow
def test_state_saved_at_two_ranks_resumes_at_three(ranks: Records) -> None:
    """Saved at world size 2 after 3 steps, resumed at 3: every remaining sample arrives exactly once."""
    saved, resumed = ranks["save2"], ranks["resume3"]
    for kind in KINDS:
        head = [i for record in saved for i in record[kind]["0"]["head"]]
        rest = [i for record in resumed for i in record[kind]["0->0"]["rest"]]
        assert len(head) == 3 * 2 * 4, kind
        assert Counter(head + rest) == Counter(range(TOTAL)), kind


@pytest.mark.slow
def test_a_failure_on_rank_0_fails_every_rank_instead_of_hanging(ranks: Records) -> None:
    """Shards that are not there: rank 0 reports the folder, the other rank hears of it and fails too."""
    records = ranks["missing"]
    for kind in KINDS:
        assert "dataset.urls: " in records[0][kind]["error"] and "nowhere" in records[0][kind]["error"]
        assert "reading the shards index failed on rank 0: ShardNotFoundError" in records[1][kind]["error"]


@pytest.mark.slow
@pytest.mark.parametrize("balance", ["pad", "drop"])
def test_four_ranks_take_equal_steps_over_shards_that_do_not_divide(ranks: Records, balance: str) -> None:
    """55 samples on 4 ranks: every rank takes the same steps (``len()`` says so); ``drop`` gives
    disjoint parts short of the 3 samples left over, ``pad`` covers every sample and repeats one."""
    for kind in KINDS:
        parts = [record[kind][balance] for record in ranks["balanced"]]
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
    ranks: Records, saved: int, loaded: int
) -> None:
    """Saved mid-epoch at 4 ranks (with 0 or 2 workers), resumed at 2 (with the other count): the
    samples before and after, counted over every rank, are the epoch's, each exactly once, and
    each rank opens only the shards that hold its part of the rest."""
    for kind in KINDS:
        head = [i for record in ranks["save4"] for i in record[kind][str(saved)]["head"]]
        rest = [i for record in ranks["resume2"] for i in record[kind][f"{saved}->{loaded}"]["rest"]]
        assert len(head) == STEPS_4 * 4 * 4, kind
        assert Counter(head + rest) == Counter(range(TOTAL_4)), kind
        for record in ranks["resume2"]:  # each rank opened only the shards that hold its part
            resumed = record[kind][f"{saved}->{loaded}"]
            needed = {bisect.bisect_right(ENDS_4, i) for i in resumed["rest"]}
            assert {_shard_number(url) for url in resumed["opened"]} == needed, kind
