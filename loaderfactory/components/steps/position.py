"""Where a :class:`~loaderfactory.components.steps.ShardedDataLoader` stands in its epochs: what the
next pass starts from, what a state records of it, and the checks of a loaded state's fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loaderfactory.components.state import require_int, require_int_list
from loaderfactory.components.steps.sampling import EpochPlan, ShardPlanner


@dataclass
class Position:
    """The epoch the next pass loads, the rollover it starts with, and where in it to go on from.

    ``start`` counts indices of the epoch's pool (steps, with a batch sampler) consumed by all ranks,
    ``done`` the steps this rank delivered before it. ``stopped_at`` is the plan of an unfinished pass
    and the steps it yielded, kept after an early break so a state taken then resumes after the last
    batch delivered.
    """

    epoch: int = 0
    carry: list[int] = field(default_factory=list)
    start: int = 0
    done: int = 0
    stopped_at: tuple[EpochPlan, int] | None = None

    def next_plan(self, planner: ShardPlanner) -> EpochPlan:
        """The plan of the pass starting now; the pass after it loads the next epoch from its start."""
        plan = planner.plan(self.epoch, self.carry, self.start, self.done)
        self.epoch, self.start, self.done, self.stopped_at = self.epoch + 1, 0, 0, None
        return plan

    def set_epoch(self, epoch: int) -> None:
        """Load ``epoch`` next; a loaded state stays in force for its own epoch."""
        if epoch != self.epoch:
            self.start = self.done = 0
        self.epoch = epoch

    def finished(self, plan: EpochPlan) -> None:
        self.carry = list(plan.carry_out)
        self.stopped_at = None

    def state(self, running: tuple[EpochPlan, int] | None) -> dict[str, Any]:
        """``epoch``, ``position``, ``steps`` and ``carry``, the same on every rank; ``running`` is the
        plan of the pass now running and the steps it yielded."""
        stopped = running if running is not None else self.stopped_at
        if stopped is None:
            return {
                "epoch": self.epoch,
                "position": self.start,
                "steps": self.done,
                "carry": list(self.carry),
            }
        plan, delivered = stopped
        return {
            "epoch": plan.epoch,
            "position": plan.position_after(delivered),
            "steps": plan.done + delivered,
            "carry": list(plan.carry_in),
        }


def read_position(
    owner: str, state: Mapping[str, Any], planner: ShardPlanner, last_index: int | None
) -> Position:
    """The :class:`Position` a state records, each field checked (``StateFieldError`` naming it)."""
    epoch = require_int(owner, state, "epoch")
    saved_world = require_int(owner, state, "world_size", low=1) if "world_size" in state else 1
    rollover = planner.last_batch == "rollover" and planner.batch_size is not None
    # A rollover is less than one step of all the ranks that saved it.
    most = saved_world * (planner.batch_size or 0) * planner.num_shards - 1
    carry = require_int_list(owner, state, "carry", high=last_index, max_length=most if rollover else 0)
    position = require_int(owner, state, "position", high=_epoch_end(planner, len(carry)))
    steps = require_int(owner, state, "steps")
    return Position(epoch, carry, position, steps)


def _epoch_end(planner: ShardPlanner, carry: int) -> int | None:
    """The largest position of an epoch that starts with ``carry`` rolled-over indices."""
    try:
        return carry + planner.total() if planner.elastic else planner.count()
    except TypeError:  # a sampler of yours without len()
        return None
