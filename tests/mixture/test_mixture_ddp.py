"""A scheduled mixture across real gloo process groups: a state saved at 4 ranks resumes at 2, one
saved at 2 at 3, mid-schedule, and every remaining draw is delivered exactly once.

Three torchrun runs share the work (a process group costs seconds): 4 ranks save; 2 ranks resume the
4-rank state and save their own; 3 ranks resume that. Draws are counted as ``(source, id)`` pairs
against the epoch's draws read from the dataset directly.
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
from mixture_ddp_scenarios import BATCH_SIZE_STEPS, GLOBAL_BATCHES, LOADERS, STEPS, config

from loaderfactory import build_loader

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests/support/mixture_ddp_scenarios.py"


def _torchrun(world_size: int, out: Path, resume: int | None) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests/support'}", OMP_NUM_THREADS="1")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
        str(SCRIPT), str(out), *(["--resume", str(resume)] if resume else []),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((out / f"w{world_size}-rank{r}.json").read_text()) for r in range(world_size)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("mixture-ddp")
    return {4: _torchrun(4, out, None), 2: _torchrun(2, out, 4), 3: _torchrun(3, out, 2)}


def epoch_draws(name: str) -> Counter[tuple[str, int]]:
    """The epoch's draws, read from the mixture itself in one process."""
    made = config(name)
    with build_loader({**made, "loader": {**made["loader"], "kind": "torch", "num_workers": 0}}) as loader:
        mixture = loader.dataset
        located = [mixture.locate(k, epoch=0) for k in range(len(mixture))]
        ids = [int(mixture.sources[s][i]["index"]) for s, i in located]
        return Counter((mixture.names[s], index) for (s, _), index in zip(located, ids, strict=True))


def counted(records: list[dict[str, Any]], name: str, part: str) -> Counter[tuple[str, int]]:
    return Counter((source, index) for record in records for source, index in record[name][part])


@pytest.mark.parametrize("name", list(LOADERS))
@pytest.mark.parametrize(("saved", "resumed"), [(4, 2), (2, 3)])
def test_a_mixture_resumed_at_another_world_size_delivers_every_remaining_draw_once(
    runs: dict[int, list[dict[str, Any]]], name: str, saved: int, resumed: int
) -> None:
    before, after = counted(runs[saved], name, "head"), counted(runs[resumed], name, "rest")
    assert before + after == epoch_draws(name)
    lengths = [record[name]["len"] for record in runs[resumed]]
    if name == "batch-sizes":
        assert lengths == [BATCH_SIZE_STEPS] * resumed  # whole epoch, in global steps
    else:
        assert sum(before.values()) == saved * STEPS * 4  # mid-epoch, before the schedule's second point
        assert lengths == [240 // resumed // 4] * resumed


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_source_with_its_own_global_batch_gives_each_rank_its_share_of_it(
    runs: dict[int, list[dict[str, Any]]], world_size: int
) -> None:
    """Each rank's batches of a ``per_source`` step come from one source, of that source's global
    batch split between the ranks, the ranks in step."""
    per_rank = [record["batch-sizes"]["batches"] for record in runs[world_size]]
    assert len({len(batches) for batches in per_rank}) == 1
    for step in zip(*per_rank, strict=True):
        sources = {tuple(names) for names, _ in step}
        assert len(sources) == 1 and len(next(iter(sources))) == 1
        (name,) = next(iter(sources))
        assert {size for _, size in step} == {GLOBAL_BATCHES[name] // world_size}
