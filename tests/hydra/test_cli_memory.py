"""The report's memory figure: the process tree's PSS, so forked workers' shared pages count once."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from cli_forks import QUICK, cli
from torch.utils.data import DataLoader, Dataset

from loaderfactory.stats import PeakMemory

pytestmark = pytest.mark.usefixtures("cli_forks")  # forks the command instead of starting it


class _Numbers(Dataset[int]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        return index


def _children_rss_mb() -> float:
    total = 0
    for child in psutil.Process().children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


@pytest.mark.skipif(PeakMemory().measure != "pss", reason="PSS is read from /proc (Linux)")
def test_forked_workers_add_far_less_than_their_rss_sum() -> None:
    """Two forked workers share the main process's pages: the PSS the loader adds stays under a
    quarter of what summing the workers' RSS would add (each worker's RSS counts those pages again)."""
    loader = DataLoader(_Numbers(), batch_size=4, num_workers=2, multiprocessing_context="fork")
    seen: list[int] = []
    rss_sum_mb = 0.0
    with PeakMemory() as memory:
        for batch in loader:
            seen.extend(batch.tolist())
            rss_sum_mb = max(rss_sum_mb, _children_rss_mb())
    assert sorted(seen) == list(range(64))
    assert memory.measure == "pss" and rss_sum_mb > 0
    assert memory.growth_mb < 0.25 * rss_sum_mb, (memory.growth_mb, rss_sum_mb)
    assert memory.own_peak_rss_mb > 0


def test_the_report_names_its_memory_measure(tmp_path: Path) -> None:
    """The report's tree figures say what they measured; the table labels them with it."""
    result = cli(tmp_path, *QUICK, "loader=torch_workers", "run.batches=4")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    measure = report["memory_measure"]
    assert measure in ("pss", "rss")
    for key in ("peak_rss_mb", "peak_memory_mb", "peak_growth_mb"):
        assert isinstance(report[key], float), key
    assert f"peak memory with workers ({measure.upper()})" in result.stdout
