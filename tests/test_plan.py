"""``run.mode=plan``: what a config will run and hold, before anything starts, close to a real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_forks import run_command
from torch.utils.data import default_collate

import loaderfactory
from loaderfactory import Loader
from loaderfactory.plan import format_plan, make_plan

BIG = [
    "dataset.length=24",
    "dataset.fields.image.shape=[5,128,128,128]",  # 40 MiB items: every buffer is its own mapping
    "loader.batch_size=2",
    "stream=buffered",
    "stream.buffer_size=2",
    "prefetch.buffer_size=2",
    "run.progress=false",
    "run.plots=false",
    "seed=0",
]


def test_plan_names_what_runs_per_slot_and_starts_nothing() -> None:
    """Threads and processes per slot, batches per epoch, and bytes from one loaded item."""
    cfg = loaderfactory.compose(["loader=torch_workers", "dataset.length=40", "loader.batch_size=4"])
    with loaderfactory.build_loader(cfg) as loader:
        plan = make_plan(loader)
        assert loader["loader"]._iterator is None  # no worker was started to make the plan
    assert plan.batches_per_epoch == 10
    item = 3 * 32 * 32 * 4 + 8  # the default synthetic item: an image and a label
    assert (plan.item_bytes, plan.batch_bytes) == (item, 4 * item)
    by_slot = {s.slot: s for s in plan.slots}
    assert by_slot["loader"].runs == "2 process worker(s)"
    assert by_slot["loader"].holds_bytes == 2 * 2 * 4 * item  # workers × prefetch_factor batches
    assert by_slot["prefetch"].runs == "1 producer thread"
    assert plan.total_bytes == sum(s.holds_bytes for s in plan.slots)
    assert "batches per epoch: 10" in format_plan(plan)


def test_plan_of_a_rank_and_a_queue() -> None:
    """A sharded loader's plan is per rank; a queue's holds its capacity of items."""
    sharded = {
        "dataset": {"kind": "synthetic", "length": 21},
        "loader": {"kind": "sharded", "batch_size": 5, "distributed": {"rank": 1, "world_size": 2}},
    }
    with loaderfactory.build_loader(sharded) as loader:
        plan = make_plan(loader)
    assert (plan.rank, plan.world_size, plan.batches_per_epoch) == (1, 2, 3)  # 11 items, padded
    assert "(rank 1 of 2)" in format_plan(plan)
    queued = {
        "dataset": {"kind": "synthetic", "length": 64},
        "queue": {"kind": "ram", "capacity": 16, "num_workers": 2, "batch_size": 4, "epoch_size": 5},
    }
    with loaderfactory.build_loader(queued) as loader:
        plan = make_plan(loader)
    queue = next(s for s in plan.slots if s.slot == "queue")
    assert queue.holds_bytes == (16 + 2) * plan.item_bytes  # type: ignore[operator]
    assert plan.batches_per_epoch == 5


@pytest.mark.usefixtures("cli_forks")  # the command forks from the session's server (cli_forks.py)
def test_plan_mode_on_the_command_line_writes_nothing(tmp_path: Path) -> None:
    """``run.mode=plan`` prints the plan and writes no file (no run folder) where it runs."""
    result = run_command(tmp_path, "run.mode=plan", "loader=torch_workers")
    assert result.returncode == 0, result.stderr
    assert "loader    ResumableDataLoader: 2 process worker(s)" in result.stdout
    assert "data held at most:" in result.stdout
    assert list(tmp_path.iterdir()) == []


def _run_command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m loaderfactory ARGS`` with its output in ``tmp_path / "run"``, given minutes: the
    step below may last most of one on a busy machine."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "loaderfactory", *args, f"hydra.run.dir={tmp_path / 'run'}"]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)


def _seconds_per_batch(loader: Loader) -> float:
    """How long making one batch of ``loader``'s data takes in this process now: on a busy machine
    several times what it takes on an idle one."""
    dataset = loader["dataset"]
    started = time.perf_counter()
    default_collate([dataset[0], dataset[1]])
    return time.perf_counter() - started


@pytest.mark.slow
def test_plan_is_within_a_quarter_of_a_real_runs_peak(tmp_path: Path) -> None:
    """On the built-in data, with a consumer slower than loading (buffers full), the memory a real
    run adds at its peak is within 25% of the plan."""
    with loaderfactory.build_loader(loaderfactory.compose(BIG)) as loader:
        plan = make_plan(loader)
        per_batch = _seconds_per_batch(loader)
    planned_mib = plan.total_bytes / 2**20
    # The peak comes while the consumer holds its first batch and every buffer fills behind it: one
    # step long enough to make all the batches the plan holds twice over, at the pace measured just
    # now, so the buffers are full when the run measures however busy the machine is.
    held_batches = plan.total_bytes / plan.batch_bytes
    step_ms = 1000 * min(60.0, max(0.5, 2 * held_batches * per_batch))
    ran = _run_command(tmp_path, *BIG, f"run.step_ms={step_ms:.0f}", "run.batches=1")
    assert ran.returncode == 0, ran.stderr
    measured = json.loads((tmp_path / "run" / "report.json").read_text())["peak_growth_mb"]
    assert abs(measured - planned_mib) <= 0.25 * planned_mib, (measured, planned_mib, step_ms)


class _Undescribed:
    """A component of a user's kind that says nothing about its memory."""

    num_workers = 3
    worker_type = "thread"

    def __init__(self, source: list[int]) -> None:
        self.source = source

    def __iter__(self) -> Iterator[int]:
        return iter(self.source)

    def __len__(self) -> int:
        return len(self.source)


def test_a_component_without_a_footprint_gets_a_line_saying_so() -> None:
    """A kind plan.py has never heard of is described from its workers and marked as not estimated."""
    plan = make_plan(Loader({"loader": _Undescribed([1, 2, 3])}))
    line = next(s for s in plan.slots if s.slot == "loader")
    assert (line.kind, line.runs, line.holds_bytes) == ("_Undescribed", "3 thread worker(s)", 0)
    assert line.holds == "not estimated: _Undescribed has no footprint(item_bytes, batch_bytes)"
    assert "unknown: not a built-in kind" not in format_plan(plan)
