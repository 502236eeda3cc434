"""``run.mode=plan``: what a loader will run and the memory it will hold, before anything starts.

Building a :class:`~loaderfactory.loader.Loader` starts no thread or process (they start on the
first ``iter()``), so the plan asks the built components: each says what it runs and holds with
``footprint(item_bytes, batch_bytes) -> (runs, bytes, what)``; a component without one gets a line
from its ``num_workers``, marked "not estimated". Bytes come from one item loaded from the dataset,
times the batch size (a shards dataset's from its index: no shard is opened, see
:mod:`loaderfactory.shards.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loaderfactory.components.data.batch_utils import batch_nbytes
from loaderfactory.components.data.sources import is_map_style
from loaderfactory.components.order import BALANCE
from loaderfactory.loader import Loader


@dataclass(frozen=True)
class SlotPlan:
    """One slot: what runs for it and the most data it holds at once."""

    slot: str
    kind: str
    runs: str
    holds_bytes: int
    holds: str


@dataclass
class Plan:
    """The whole pipeline's plan; :attr:`total_bytes` is the data it holds at most."""

    slots: list[SlotPlan] = field(default_factory=list)
    batches_per_epoch: int | None = None
    rank: int = 0
    world_size: int = 1
    item_bytes: int | None = None
    batch_bytes: int | None = None
    shards: dict[str, Any] | None = None
    """A shards dataset's figures (:func:`loaderfactory.shards.plan.shards_plan`); None: not one."""
    mixture: dict[str, Any] | None = None
    """A mixture's figures (:func:`loaderfactory.mixture.plan.mixture_plan`); None: not one."""

    @property
    def total_bytes(self) -> int:
        return sum(s.holds_bytes for s in self.slots)

    def as_dict(self) -> dict[str, Any]:
        return {
            "batches_per_epoch": self.batches_per_epoch,
            "rank": self.rank,
            "world_size": self.world_size,
            "item_bytes": self.item_bytes,
            "batch_bytes": self.batch_bytes,
            "total_bytes": self.total_bytes,
            "slots": [s.__dict__ for s in self.slots],
            **({"shards": self.shards} if self.shards is not None else {}),
            **({"mixture": self.mixture} if self.mixture is not None else {}),
        }


def make_plan(loader: Loader) -> Plan:
    """The plan of a built, not yet iterated ``loader``."""
    from loaderfactory.mixture.dataset import MixtureDataset
    from loaderfactory.mixture.plan import mixture_plan
    from loaderfactory.shards.find import find_shards
    from loaderfactory.shards.plan import mean_sample_bytes, shards_plan

    dataset = loader.dataset
    shards = find_shards(dataset) if dataset is not None else None
    if shards is not None:  # the index tells; reading an item would open a shard, maybe fetch it
        item_bytes = mean_sample_bytes(shards)
    else:
        item = _first_item(dataset)
        item_bytes = batch_nbytes(item) if item is not None else None
    plan = Plan(item_bytes=item_bytes)
    try:
        plan.batches_per_epoch = len(loader)
    except TypeError:  # an unsized iterable: as many batches as it yields
        plan.batches_per_epoch = None
    per_batch = _items_per_batch(loader)
    plan.batch_bytes = item_bytes * per_batch if item_bytes is not None else None
    batch = plan.batch_bytes or 0
    for slot, component in loader.components.items():
        plan.slots.append(_slot_plan(slot, component, item_bytes or 0, batch, plan))
    plan.slots.append(SlotPlan("consumer", "your loop", "your thread", batch, "the batch in hand"))
    if shards is not None:
        balance = getattr(getattr(loader.spec, "loader", None), "balance", None)
        plan.shards = shards_plan(
            shards,
            plan.rank,
            plan.world_size,
            balance if balance in BALANCE else "pad",
            batch_size=per_batch,
            shuffled=_shuffled(loader),
        )
    if isinstance(dataset, MixtureDataset):
        plan.mixture = mixture_plan(dataset)
    return plan


def _shuffled(loader: Loader) -> bool:
    """Whether the loader reads in a shuffled order: a queue (it samples at random) or ``shuffle``."""
    if loader.components.get("queue") is not None:
        return True
    return bool(getattr(getattr(loader.spec, "loader", None), "shuffle", False))


def _first_item(dataset: Any) -> Any:
    if dataset is None or not is_map_style(dataset) or len(dataset) == 0:
        return None
    return dataset[0]


def _items_per_batch(loader: Loader) -> int:
    queue = loader.components.get("queue")
    if queue is not None:
        return int(getattr(queue, "batch_size", 1))
    batcher = loader.components.get("loader")
    size = getattr(batcher, "items_per_batch", None) or getattr(batcher, "batch_size", None) or 1
    return int(size) * int(getattr(batcher, "num_shards", 1) or 1)


def _slot_plan(slot: str, component: Any, item: int, batch: int, plan: Plan) -> SlotPlan:
    """What the component says of itself (its ``footprint``), or what its common attributes tell."""
    kind = type(component).__name__
    if hasattr(component, "world_size"):  # a rank's loader: the plan is this rank's
        plan.rank = int(getattr(component, "rank", 0))
        plan.world_size = int(component.world_size)
    footprint = getattr(component, "footprint", None)
    if callable(footprint):
        runs, held, what = footprint(item, batch)
        return SlotPlan(slot, kind, runs, int(held), what)
    if slot == "dataset":
        return SlotPlan(slot, kind, "read by the next slot", 0, "items are loaded on demand")
    workers = int(getattr(component, "num_workers", 0) or 0)
    runs = (
        f"{workers} {getattr(component, 'worker_type', 'process')} worker(s)"
        if workers
        else "its caller's thread"
    )
    return SlotPlan(slot, kind, runs, 0, f"not estimated: {kind} has no footprint(item_bytes, batch_bytes)")


def format_plan(plan: Plan) -> str:
    """The plan as the terminal shows it."""
    lines = [
        f"batches per epoch: {plan.batches_per_epoch if plan.batches_per_epoch is not None else 'unknown'}"
        + (f" (rank {plan.rank} of {plan.world_size})" if plan.world_size > 1 else ""),
        f"one item: {_mib(plan.item_bytes)}; one batch: {_mib(plan.batch_bytes)}",
    ]
    width = max(len(s.slot) for s in plan.slots)
    for s in plan.slots:
        lines.append(
            f"  {s.slot:<{width}}  {s.kind}: {s.runs}; holds up to {_mib(s.holds_bytes)} ({s.holds})"
        )
    lines.append(f"data held at most: {_mib(plan.total_bytes)}")
    if plan.shards is not None:
        from loaderfactory.shards.plan import format_shards_plan

        lines += format_shards_plan(plan.shards, plan.batches_per_epoch)
    if plan.mixture is not None:
        from loaderfactory.mixture.plan import format_mixture_plan

        lines += format_mixture_plan(plan.mixture)
    return "\n".join(lines)


def _mib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / 2**20:.1f} MiB"
