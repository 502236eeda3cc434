"""The run report's figure: one panel per question the run can answer, read from the figure's axes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_forks import QUICK, cli
from shards_data import write_indexed_tar_shards

import loaderfactory as lf
from loaderfactory.gauges import GaugeSampler
from loaderfactory.hydra.figure import config_title, run_gauges, run_record
from loaderfactory.run_figure import (
    QUEUE_TITLE,
    SHARDS_TITLE,
    STAGES_TITLE,
    WAIT_TITLE,
    QueueFill,
    RunRecord,
    ShardReads,
    build_run_figure,
    save_run_figure,
)
from loaderfactory.shards.find import find_shards

DATASET = {"kind": "synthetic", "length": 40, "fields": {"x": {"shape": [4]}}}


def _titles(record: RunRecord) -> list[str]:
    """The panels' titles, top to bottom, each cut at its first " (" (the rest explains it)."""
    return [ax.get_title().split(" (")[0] for ax in build_run_figure(record).axes]


def _record(**fields: Any) -> RunRecord:
    waits = [0.2, 0.001, 0.002, 0.0, 0.05, 0.001]
    values: dict[str, Any] = {
        "title": "dataset synthetic · loader torch, workers 2, batch 8",
        "arrivals": [0.2 + 0.01 * i for i in range(len(waits))],
        "waits": waits,
        "wall_s": 0.5,
    }
    return RunRecord(**{**values, **fields})


def _run_figure_of(config: dict[str, Any]) -> tuple[RunRecord, list[str]]:
    """Build ``config``'s loader, draw one epoch while sampling its gauges, as the command does; the
    record and its figure's panel titles."""
    with lf.build_loader(config) as loader:
        with GaugeSampler(run_gauges(loader)) as gauges:
            list(loader)
        summary = loader.telemetry()
        shards = find_shards(list(loader.components.values()))
        if shards is not None:
            summary["shards"] = shards.stats()
        summary["config"] = config
        record = run_record(loader, summary, gauges.readings)
    return record, _titles(record)


def test_a_plain_run_has_only_the_wait_panel_on_a_log_axis() -> None:
    """Without stages, a queue or shards the figure is one panel: the wait per batch, log-scaled,
    against seconds; the title names the config and the share of the run spent waiting."""
    record = _record()
    figure = build_run_figure(record)
    (ax,) = figure.axes
    assert ax.get_title().startswith(WAIT_TITLE) and ax.get_yscale() == "log"
    assert "seconds" in ax.get_xlabel() and "ms" in ax.get_ylabel()
    title = figure.get_suptitle()
    assert title.startswith("dataset synthetic · loader torch, workers 2, batch 8\n")
    assert record.wait_share == pytest.approx(sum(record.waits) / 0.5)
    assert f"waiting for data: {record.wait_share:.1%} of the run" in title


@pytest.mark.parametrize(
    ("fields", "titles"),
    [
        ({"stages": {"queue: first fill": 0.1}}, [WAIT_TITLE, STAGES_TITLE]),
        (
            {"queue": QueueFill([0.0, 0.1], [3, 8], [300, 800], capacity=8, budget_bytes=10_000)},
            [WAIT_TITLE, QUEUE_TITLE],
        ),
        ({"shards": ShardReads([0.0, 0.1, 0.2], [0, 2, 4], [0, 0, 0])}, [WAIT_TITLE, SHARDS_TITLE]),
        ({"queue": QueueFill([], [], [], capacity=8, budget_bytes=10)}, [WAIT_TITLE]),
        ({"shards": ShardReads([], [], [])}, [WAIT_TITLE]),
    ],
)
def test_panels_appear_only_for_what_the_run_has(fields: dict[str, Any], titles: list[str]) -> None:
    """Stages, a queue's fill and shards read each add their panel; with no readings, none is drawn."""
    assert _titles(_record(**fields)) == titles


def test_the_queue_panel_shows_items_and_bytes_as_shares_of_their_limits() -> None:
    """Items are drawn against the capacity and bytes against the budget, both in percent."""
    queue = QueueFill([0.0, 0.1], [2, 8], [1000, 5000], capacity=8, budget_bytes=10_000)
    ax = build_run_figure(_record(queue=queue)).axes[1]
    lines = {str(line.get_label()).split(",")[0]: list(line.get_ydata()) for line in ax.get_lines()}
    assert lines == {"items": [25.0, 100.0], "bytes": [10.0, 50.0]}
    labels = [str(line.get_label()) for line in ax.get_lines()]
    assert labels == ["items, of capacity 8", "bytes, of budget 0.01 MB (peak 0.005 MB)"]


def test_a_long_run_is_drawn_as_median_and_longest_wait_per_time_bin() -> None:
    """Past 20 000 batches the waits are summarised per time bin instead of one dot each."""
    count = 20_001
    record = _record(arrivals=[i * 1e-3 for i in range(count)], waits=[1e-3] * (count - 1) + [2.0])
    (ax,) = build_run_figure(record).axes
    labels = [str(line.get_label()) for line in ax.get_lines()]
    assert labels[:2] == ["longest in each time bin", "median in each time bin"]
    assert max(ax.get_lines()[0].get_ydata()) == pytest.approx(2000.0)
    assert ax.get_yscale() == "log"


def test_a_torch_run_shows_the_waits_alone() -> None:
    """A torch loader times no stage of its own and has no queue or shards: one panel, and its
    waiting share is the loader stats' wait over their wall time."""
    record, titles = _run_figure_of({"dataset": DATASET, "loader": {"kind": "torch", "batch_size": 8}})
    assert titles == [WAIT_TITLE]
    assert len(record.waits) == len(record.arrivals) == 5
    assert record.title == "dataset synthetic · loader torch, batch 8"


def test_a_queue_run_shows_its_first_fill_and_its_fill_over_time() -> None:
    """A RAM queue adds its first fill to the stages and its sampled fill level."""
    config = {"dataset": DATASET, "queue": {"kind": "ram", "epoch_size": 6, "capacity": 10}, "seed": 0}
    record, titles = _run_figure_of(config)
    assert titles == [WAIT_TITLE, STAGES_TITLE, QUEUE_TITLE]
    assert list(record.stages) == ["queue: first fill"]
    assert record.queue is not None and record.queue.capacity == 10
    # Readings come from a thread at intervals (a run this short may end between two): within the limits.
    assert record.queue.items and all(0 <= items <= 10 for items in record.queue.items)


def test_a_shards_run_shows_the_shards_opened_over_time(tmp_path: Path) -> None:
    """A shards dataset adds the count of shards opened, ending with every shard of the epoch."""
    urls = write_indexed_tar_shards(tmp_path, [3, 4, 5])
    config = {"dataset": {"kind": "shards", "urls": urls}, "loader": {"kind": "torch", "batch_size": 4}}
    record, titles = _run_figure_of(config)
    assert titles == [WAIT_TITLE, SHARDS_TITLE]
    assert record.shards is not None and record.shards.opened[-1] >= 3


def test_the_title_names_each_slot_with_its_key_facts() -> None:
    """Slots in pipeline order, with workers, batch size and buffer where they have them."""
    config = {
        "dataset": {"kind": "shards", "urls": "x"},
        "queue": None,
        "loader": {"kind": "torch", "num_workers": 2, "batch_size": 32, "prefetch_factor": None},
        "prefetch": {"kind": "thread", "buffer_size": 4},
    }
    assert config_title(config) == (
        "dataset shards · loader torch, workers 2, batch 32 · prefetch thread, buffer 4"
    )


def test_save_run_figure_writes_a_png(tmp_path: Path) -> None:
    """The figure is written as a PNG where asked, folders made."""
    path = save_run_figure(_record(stages={"x": 1.0}), tmp_path / "out" / "report.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_command_writes_the_figure_beside_its_report(tmp_path: Path) -> None:
    """``run.report=run.json`` puts the figure in ``run.png``, named in the report's ``plots``."""
    result = cli(tmp_path, *QUICK, "run.plots=true", "run.report=run.json", "run.batches=3")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "run" / "run.json").read_text())
    assert report["plots"] == [str(tmp_path / "run" / "run.png")]
    assert (tmp_path / "run" / "run.png").read_bytes()[:4] == b"\x89PNG"
