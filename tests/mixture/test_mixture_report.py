"""What a mixture shows before and after a run: ``run.mode=plan``'s lines, the report's drawn and
target samples per source, and the figure of its shares over the steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread

from loaderfactory import build_loader, compose, validate
from loaderfactory.hydra.cli import run_app
from loaderfactory.hydra.job import run_job
from loaderfactory.mixture.shares import save_shares_figure, shares_over_steps

CURRICULUM = [
    "dataset=web_and_curated",
    "~dataset.sources.web.weight",
    "~dataset.sources.curated.weight",
    "dataset.weights=[{at:0,weights:{web:1}},{at:3000,weights:{curated:1}}]",
    "dataset.interpolate=linear",
    "dataset.stop={samples:2048}",
    "loader.batch_size=32",
]


def test_plan_shows_each_epochs_samples_passes_and_where_sources_run_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_app(compose(["dataset=web_and_curated", "run.mode=plan"]))
    out = capsys.readouterr().out
    assert "mixture: 2048 samples an epoch" in out
    assert "epoch 0  web: 1536 samples (75.0%), 1 pass(es), read whole by position" in out
    run_app(compose([*CURRICULUM, "run.mode=plan"]))
    out = capsys.readouterr().out
    assert "(weights on a schedule: the first epochs)" in out
    assert "epoch 2  web: 0 samples (0.0%), 0 pass(es), not read whole" in out
    assert "epoch 2  curated: 2048 samples (100.0%), 4 pass(es), read whole by position 512" in out


def test_the_run_report_counts_each_sources_draws_against_its_target(tmp_path: Path) -> None:
    config = validate(compose([*CURRICULUM, "run.batches=150", "run.plots=true"]))
    summary = run_job(config, tmp_path, lambda text: None)
    assert summary["mixture"] == {
        "web": {"drawn": 1500, "target": 1500.0},
        "curated": {"drawn": 3300, "target": 3300.0},
    }
    (png,) = summary["plots"]
    assert imread(png).shape[0] > 400  # the waits' panel and the shares' panel below it


def test_shares_over_steps_follow_the_schedule_and_draw_a_figure(tmp_path: Path) -> None:
    with build_loader(compose(CURRICULUM)) as loader:
        shares = shares_over_steps(loader.dataset, samples_per_step=32, steps=150)
    assert shares.names == ["web", "curated"] and shares.steps[-1] == 150
    assert np.allclose(shares.achieved.sum(axis=1), 1) and np.allclose(shares.target.sum(axis=1), 1)
    assert np.abs(shares.achieved - shares.target).max() < 3 / 32  # a few samples a step, at most
    assert shares.target[0, 0] > 0.95 and shares.target[-1, 1] == 1.0  # web first, curated at the end
    png = save_shares_figure(shares, tmp_path / "shares.png")
    assert imread(png).shape[1] > 500


@pytest.mark.parametrize(
    ("weights", "unit", "stop"),
    [
        ([(0, {"a": 3, "b": 1})], 1, 100),  # fixed weights: every epoch alike
        ([(0, {"a": 1}), (250, {"b": 1})], 1, 100),  # a schedule: the epochs join up
        ([(0, {"a": 1}), (250, {"b": 1})], 8, 100),  # batches of 8 from one source: 100 leaves a part
    ],
    ids=["fixed", "scheduled", "per source"],
)
def test_shares_since_the_start_add_up_the_epochs_before(weights: Any, unit: int, stop: int) -> None:
    from loaderfactory.mixture.dataset import MixtureDataset

    sources = {"a": list(range(30)), "b": list(range(20))}
    mixture = MixtureDataset(sources, weights, stop, unit=unit)
    for epoch, position in [(0, 37), (3, 0), (3, 61), (4, 100)]:
        shares = mixture.shares(epoch, position)
        for s, name in enumerate(mixture.names):
            whole = sum(int(mixture.draws(e)[s]) for e in range(epoch))
            assert shares[name]["drawn_since_start"] == whole + shares[name]["drawn"]
            target = sum(mixture.shares(e, stop)[name]["target"] for e in range(epoch))
            assert shares[name]["target_since_start"] == pytest.approx(target + shares[name]["target"])
