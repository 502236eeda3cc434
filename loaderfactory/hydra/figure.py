"""The command's run figure: which gauges to sample while the batches are drawn, and the
:class:`~loaderfactory.run_figure.RunRecord` drawn from them, the loader's stats and the report."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loaderfactory.gauges import Gauge, Readings
from loaderfactory.mixture.shares import SharesOverSteps, shares_over_steps
from loaderfactory.run_figure import QueueFill, RunRecord, ShardReads, save_run_figure

if TYPE_CHECKING:
    from loaderfactory.loader import Loader

QUEUE_GAUGE = "queue"
SHARDS_GAUGE = "shards"
_SLOTS = ("dataset", "queue", "loader", "stream", "prefetch")
_FACTS = (
    ("num_workers", "workers {}"),
    ("worker_type", "({})"),
    ("batch_size", "batch {}"),
    ("prefetch_factor", "prefetch_factor {}"),
    ("buffer_size", "buffer {}"),
)
"""Config fields named in the title, wherever a slot has them, and how."""


def run_gauges(loader: Loader) -> dict[str, Gauge]:
    """What to sample during the run: the fill of the first component that reports one (a queue),
    and the shards' opened and fetched counters where the pipeline reads shards."""
    from loaderfactory.shards.find import find_shards

    gauges: dict[str, Gauge] = {}
    fills = [c.fill_level for c in loader.components.values() if callable(getattr(c, "fill_level", None))]
    if fills:
        gauges[QUEUE_GAUGE] = fills[0]
    dataset = find_shards(list(loader.components.values()))
    if dataset is not None:
        counters = dataset.counters

        def shard_counts() -> dict[str, float]:
            totals = counters.totals()
            return {"opened": totals["opened"], "fetched": totals["fetched"]}

        gauges[SHARDS_GAUGE] = shard_counts
    return gauges


def run_record(loader: Loader, summary: Mapping[str, Any], readings: Mapping[str, Readings]) -> RunRecord:
    """The figure's numbers: the loader's per-batch waits, the stages its components and the
    report's ``shards`` section time, and the gauges' ``readings``, on the loader's clock."""
    stats = loader.stats
    origin = stats.started if stats.started is not None else 0.0
    arrivals = [when - origin for when in stats.arrivals]
    starts = sorted({count for count in stats.epoch_starts if count < max(len(arrivals), 1)})
    return RunRecord(
        title=config_title(summary.get("config", {})),
        arrivals=arrivals,
        waits=list(stats.waits),
        wall_s=stats.wall_s,
        pass_starts=[arrivals[count - 1] if count else 0.0 for count in starts],
        stages=_stages(loader, summary.get("shards")),
        queue=_queue_fill(readings.get(QUEUE_GAUGE), origin),
        shards=_shard_reads(readings.get(SHARDS_GAUGE), origin),
        mixture=_mixture_shares(loader, len(arrivals)),
    )


def _mixture_shares(loader: Loader, steps: int) -> SharesOverSteps | None:
    """A mixture's shares over the run's steps (all ranks' samples a step, from the loader's length)."""
    from loaderfactory.mixture.dataset import MixtureDataset

    dataset = loader.dataset
    if not isinstance(dataset, MixtureDataset) or steps == 0:
        return None
    try:
        per_step = -(-len(dataset) // max(len(loader), 1))
    except TypeError:  # an unsized stage after it
        return None
    return shares_over_steps(dataset, per_step, steps)


def write_figure(record: RunRecord, report: Path) -> Path:
    """The figure as a PNG beside the JSON report, with its name: ``report.json`` → ``report.png``."""
    return save_run_figure(record, report.with_suffix(".png"))


def config_title(config: Mapping[str, Any]) -> str:
    """The config's key facts, slot by slot: ``dataset synthetic · loader torch, workers 2, batch 32``."""
    parts = []
    for slot in _SLOTS:
        node = config.get(slot)
        if not isinstance(node, Mapping):
            continue
        facts = [shown.format(node[key]) for key, shown in _FACTS if node.get(key) is not None]
        parts.append(", ".join([f"{slot} {node.get('kind', '?')}", *facts]).replace(", (", " ("))
    return " · ".join(parts)


def _stages(loader: Loader, shards: Mapping[str, Any] | None) -> dict[str, float]:
    stages: dict[str, float] = {}
    for component in loader.components.values():
        times = getattr(component, "stage_times", None)
        if callable(times):
            stages.update(times())
    if shards:
        waited, requests = float(shards["fetch_wait_s"]), float(shards["remote_request_s"])
        if waited > 0:
            stages["shards: readers waiting on storage"] = waited
        if requests > 0 and requests != waited:
            stages["shards: remote requests"] = requests
    return stages


def _queue_fill(readings: Readings | None, origin: float) -> QueueFill | None:
    if readings is None or not readings.times:
        return None
    values = readings.values
    return QueueFill(
        times=[when - origin for when in readings.times],
        items=values["items"],
        held_bytes=values["bytes"],
        capacity=int(values["capacity"][-1]),
        budget_bytes=int(values["budget_bytes"][-1]),
    )


def _shard_reads(readings: Readings | None, origin: float) -> ShardReads | None:
    if readings is None or not readings.times:
        return None
    return ShardReads(
        times=[when - origin for when in readings.times],
        opened=readings.values["opened"],
        fetched=readings.values["fetched"],
    )
