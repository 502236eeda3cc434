"""Lightning over a mixture: the data module logs each source's share when asked (both packages), and
a DDP fit over a scheduled mixture resumed at another world size (2 → 3 gloo ranks) trains on exactly
the remaining draws, then on whole epochs, logging the shares of exactly the positions it reached."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lightning_helpers import installed
from lightning_mixture_fit import (
    BATCH,
    EPOCHS,
    FIXED,
    GLOBAL_BATCHES,
    LENGTH,
    PACKAGES,
    STOP,
    classes,
    config,
    draws,
    mixture,
    recorder,
    recording_logger,
    sized_mixture,
    trainer,
)

from loaderfactory import ConfigError
from loaderfactory.lightning._shares import share_metrics

ROOT = Path(__file__).resolve().parents[2]
SAVE_WORLD, RESUME_WORLD = 2, 3

pytestmark = pytest.mark.filterwarnings(
    # Lightning 2.6 flattens its loaders with a torch pytree class that torch 2.10+ deprecates.
    "ignore:.*LeafSpec.* is deprecated:FutureWarning",
    # A fit of a few steps on CPU: Lightning's advice on workers and logging intervals does not apply.
    "ignore:.*does not have many workers:UserWarning",
    "ignore:.*log_every_n_steps:UserWarning",
)


def _fit(
    package_name: str, root: Path, data: dict[str, Any], **module: Any
) -> tuple[Any, list[dict[str, float]]]:
    """Fits 2 epochs on one process with ``data``; the trainer and every metric record it logged."""
    package, module_class = classes(package_name)
    logger = recording_logger(package)
    fit = trainer(
        package, root, 1, max_epochs=2, logger=logger, log_every_n_steps=1, enable_checkpointing=False
    )
    fit.fit(recorder(package), datamodule=module_class(data, **module))
    return fit, logger.records


def _shares(records: list[dict[str, float]]) -> list[dict[str, float]]:
    return [{k: v for k, v in record.items() if k.startswith("mixture/")} for record in records]


def _expected(dataset: Any, epoch: int, position: int) -> dict[str, float]:
    """The metrics of the sources' shares over the first ``position`` positions of ``epoch``."""
    return {
        key: value
        for name, counts in dataset.shares(epoch, position).items()
        for key, value in (
            (f"mixture/{name}/share", counts["drawn"] / position),
            (f"mixture/{name}/target", counts["target"] / position),
        )
    }


@pytest.mark.parametrize("package_name", PACKAGES)
def test_the_module_logs_each_sources_share_and_target_at_every_step(
    package_name: str, tmp_path: Path
) -> None:
    """With ``log_shares=True`` every step logs, per source, the share of the epoch's samples so far and
    its target, as ``shares()`` gives them at that position; the share reaches the weight by the end of
    each epoch, and the trainer's callbacks are its own again after the fit."""
    pytest.importorskip(package_name)
    fit, records = _fit(package_name, tmp_path, config(scheduled=False), log_shares=True)
    dataset = mixture(scheduled=False)
    steps = LENGTH // BATCH
    positions = [(epoch, step * BATCH) for epoch in range(2) for step in range(1, steps + 1)]
    logged = _shares(records)
    assert len(logged) == len(positions)
    for record, (epoch, position) in zip(logged, positions, strict=True):
        assert record == pytest.approx(_expected(dataset, epoch, position), rel=1e-6), (epoch, position)
    for epoch_end in (logged[steps - 1], logged[-1]):
        for name, weight in FIXED.items():
            assert epoch_end[f"mixture/{name}/target"] == pytest.approx(weight, rel=1e-6)
            assert abs(epoch_end[f"mixture/{name}/share"] - weight) < 1 / LENGTH
    assert not any(type(callback).__name__ == "ShareLogger" for callback in fit.callbacks)


@pytest.mark.parametrize("package_name", PACKAGES)
def test_nothing_is_logged_unless_asked(package_name: str, tmp_path: Path) -> None:
    """Without ``log_shares`` a fit over a mixture logs no shares; ``hparams`` say it is off."""
    pytest.importorskip(package_name)
    fit, records = _fit(package_name, tmp_path, config(scheduled=False))
    assert records and not any(_shares(records))
    assert fit.datamodule.hparams["log_shares"] is False


def test_asking_for_shares_of_a_dataset_that_is_no_mixture_warns_and_logs_none(tmp_path: Path) -> None:
    """``log_shares=True`` over a plain dataset says the flag does nothing there and logs no shares."""
    pytest.importorskip("lightning")
    data = {
        "dataset": {"kind": "synthetic", "length": 8, "fields": {"x": {"shape": [1]}}},
        "loader": {"kind": "torch", "batch_size": 4},
    }
    with pytest.warns(UserWarning, match=r"^log_shares: the train dataset is a \w+, not a mixture"):
        _, records = _fit("lightning", tmp_path, data, log_shares=True)
    assert records and not any(_shares(records))


def test_log_shares_must_be_true_or_false() -> None:
    """A ``log_shares`` that is no bool is a ConfigError at its path, among the module's other problems."""
    pytest.importorskip("lightning")
    _, module_class = classes("lightning")
    with pytest.raises(ConfigError) as caught:
        module_class(config(), log_shares="yes", num_workers=-1, config_path="data")
    assert caught.value.paths == ["data.num_workers", "data.log_shares"]
    assert "data.log_shares: must be true or false, got 'yes'" in str(caught.value)


def test_share_metrics_follow_a_loaders_position_mid_epoch() -> None:
    """Outside Lightning too, the metrics are the shares at the loader's position: none before it reads."""
    import loaderfactory

    with loaderfactory.build_loader(config()) as loader:
        assert share_metrics(loader) == {}
        batches = iter(loader)
        for _ in range(3):
            next(batches)
        assert share_metrics(loader) == _expected(loader.dataset, 0, 3 * BATCH)


# -- a DDP fit resumed at another world size ----------------------------------------------------------


def _ranks(out: Path, mode: str, world: int, packages: list[str]) -> None:
    """Runs tests/support/lightning_mixture_fit.py ``mode`` on ``world`` gloo ranks for ``packages``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests" / "support")]), OMP_NUM_THREADS="1")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
        str(ROOT / "tests/support/lightning_mixture_fit.py"), str(out), mode, *packages,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def elastic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[Any]]]:
    """Per package: each rank's record of the fit saved on 2 ranks and of its resume on 3."""
    out = tmp_path_factory.mktemp("mixture")
    present = [package for package in PACKAGES if installed(package)]
    _ranks(out, "save", SAVE_WORLD, present)
    _ranks(out, "resume", RESUME_WORLD, present)
    return {
        package: {
            mode: [json.loads((out / package / f"{mode}-rank{r}.json").read_text()) for r in range(world)]
            for mode, world in (("save", SAVE_WORLD), ("resume", RESUME_WORLD))
        }
        for package in present
    }


def _seen(ranks: list[dict[str, Any]], epoch: int) -> collections.Counter[tuple[str, int]]:
    """(source, index) of what every rank trained on in ``epoch``."""
    key = str(epoch)
    return collections.Counter(
        (source, index) for rank in ranks for source, index in rank["epochs"].get(key, [])
    )


@pytest.mark.slow
@pytest.mark.parametrize("package_name", PACKAGES)
def test_a_ddp_fit_resumed_at_another_world_size_trains_on_exactly_the_remaining_draws(
    elastic: dict[str, dict[str, list[Any]]], package_name: str
) -> None:
    """Saved by rank 0 after 5 steps on 2 ranks, mid-schedule, and resumed on 3: the two fits' draws of
    epoch 0 are the epoch's draws exactly (before: its first 40 positions, after: the rest), every
    later epoch's draws across the ranks are that epoch's, and every rank logs the shares at the
    positions it reached."""
    pytest.importorskip(package_name)
    dataset = mixture()
    saved, resumed = elastic[package_name]["save"], elastic[package_name]["resume"]
    done = STOP * BATCH * SAVE_WORLD
    assert _seen(saved, 0) == draws(dataset, 0, range(done))
    assert _seen(resumed, 0) == draws(dataset, 0, range(done, LENGTH))
    for epoch in range(1, EPOCHS):
        assert _seen(resumed, epoch) == draws(dataset, epoch), f"epoch {epoch}"
    assert _seen(resumed, EPOCHS) == collections.Counter()
    assert list(dataset.draws(0)) != list(dataset.draws(EPOCHS - 1))  # the schedule moved the mix
    step = BATCH * RESUME_WORLD
    positions = [(0, min(p, LENGTH)) for p in range(done + step, LENGTH + step, step)]
    positions += [(e, p) for e in range(1, EPOCHS) for p in range(step, LENGTH + 1, step)]
    for rank in resumed:
        assert len(rank["logged"]) == len(positions)
        for record, (epoch, position) in zip(rank["logged"], positions, strict=True):
            assert record == pytest.approx(_expected(dataset, epoch, position), rel=1e-6), (epoch, position)


@pytest.mark.slow
def test_a_fit_over_sources_with_their_own_global_batch_resumes_at_another_world_size(
    elastic: dict[str, dict[str, list[Any]]],
) -> None:
    """A ``per_source`` mixture whose sources have their own global batch (batch_size 3 on 2 ranks,
    then 2 on 3), saved by rank 0 after 5 steps and resumed on 3 ranks: the two fits' draws of
    epoch 0 are its draws exactly, every later epoch is whole, and every step of every rank holds
    one source at its global batch split between the ranks."""
    pytest.importorskip("lightning")
    dataset = sized_mixture()
    saved = [rank["sized"] for rank in elastic["lightning"]["save"]]
    resumed = [rank["sized"] for rank in elastic["lightning"]["resume"]]
    assert _seen(saved, 0) + _seen(resumed, 0) == draws(dataset, 0)
    for epoch in range(1, EPOCHS):
        assert _seen(resumed, epoch) == draws(dataset, epoch), f"epoch {epoch}"
        assert {len(rank["sizes"][str(epoch)]) for rank in resumed} == {dataset.global_steps(epoch).count}
    for ranks, world in ((saved, SAVE_WORLD), (resumed, RESUME_WORLD)):
        for rank in ranks:
            for epoch, seen in rank["epochs"].items():
                at = 0
                for size in rank["sizes"][epoch]:
                    sources = {source for source, _ in seen[at : at + size]}
                    assert len(sources) == 1 and size == GLOBAL_BATCHES[sources.pop()] // world
                    at += size
