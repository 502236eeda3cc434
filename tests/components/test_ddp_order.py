"""The one order across real gloo process groups: no seed, rank 0's state on every rank, elastic resume.

The tests share three torchrun runs of ``tests/support/ddp_scenarios.py``, for the ``torch`` and
``sharded`` kinds (103 items, batches of 4, ``balance: uneven`` so that every count is exact) and
counts sample ids.
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

ROOT = Path(__file__).resolve().parents[2]
LENGTH = 103
KINDS = ("torch", "sharded")


Records = dict[str, list[dict[str, Any]]]
"""Each scenario's records, one per rank."""


def _run(scenarios: str, world_size: int, out: Path, *args: str) -> Records:
    """Runs comma-separated scenarios in one process group of ``world_size`` gloo ranks."""
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
        str(ROOT / "tests/support/ddp_scenarios.py"), scenarios, str(out), *args,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    def records(name: str) -> list[dict[str, Any]]:
        files = [out / f"{name}-w{world_size}-rank{rank}.json" for rank in range(world_size)]
        return [json.loads(file.read_text()) for file in files]

    return {name: records(name) for name in scenarios.split(",")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Records:
    """Every scenario, in three process groups instead of five (each start costs seconds of torch
    imports): save at 4 ranks; ``noseed``, ``rank0`` and a resume at 2; a resume at 3."""
    out = tmp_path_factory.mktemp("ddp")
    state = out / "state"
    records = _run("save", 4, out, f"--state={state}", "--steps=3")
    two = _run("noseed,rank0,resume", 2, out, f"--state={state}", "--steps=5")
    three = _run("resume", 3, out, f"--state={state}")
    return {**records, **two, "resume-w2": two["resume"], "resume-w3": three["resume"]}


@pytest.mark.slow
@pytest.mark.timeout(600)  # the first test waits for the module's three torchrun runs (150 s limit each)
def test_no_seed_anywhere_gives_disjoint_covering_parts(runs: Records) -> None:
    """Without any seed, ranks agree on one order: their parts are disjoint and cover the data, per epoch."""
    records = runs["noseed"]
    for kind in KINDS:
        for epoch in (0, 1):
            first, second = (r[kind]["epochs"][epoch] for r in records)
            assert sorted(first + second) == list(range(LENGTH)), kind
        assert records[0][kind]["epochs"][0] != records[0][kind]["epochs"][1], kind


@pytest.mark.slow
@pytest.mark.timeout(600)  # the first test waits for the module's three torchrun runs (150 s limit each)
def test_rank_0s_state_resumes_every_rank_exactly(runs: Records) -> None:
    """Every rank loading rank 0's state yields exactly its own remaining batches, then the next epoch."""
    records = runs["rank0"]
    for kind in KINDS:
        for record in records:
            assert record[kind]["got"] == record[kind]["expected"], kind
        heads = [r[kind]["head"] for r in records]
        assert set(heads[0]).isdisjoint(heads[1]), kind


@pytest.mark.slow
@pytest.mark.timeout(600)  # the first test waits for the module's three torchrun runs (150 s limit each)
def test_state_saved_at_four_ranks_resumes_at_another_world_size(runs: Records) -> None:
    """Saved at world size 4 after 3 steps, resumed at 2 and at 3: each remaining sample arrives
    exactly once."""
    saved = runs["save"]
    for world_size in (2, 3):
        resumed = runs[f"resume-w{world_size}"]
        assert [record["world_size"] for record in resumed] == [world_size] * world_size
        for kind in KINDS:
            head = [i for record in saved for i in record[kind]["head"]]
            rest = [i for record in resumed for i in record[kind]["rest"]]
            assert len(head) == 3 * 4 * 4, kind
            assert Counter(head + rest) == Counter(range(LENGTH)), (kind, world_size)
            for record in resumed:  # len(): the 3 steps delivered, then this rank's part of the rest
                assert record[kind]["len"] == 3 + record[kind]["batches"], (kind, world_size)
