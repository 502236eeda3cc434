"""One pass of a :class:`~loaderfactory.components.steps.ShardedDataLoader` over an epoch plan.

A pass hands the steps of its plan, from the resume position on, to the loader's workers (the
shared :mod:`~loaderfactory.components.workers` pools) or loads them in the consumer's thread, and
yields the batches in order. The workers' task is :class:`LoadStep`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from loaderfactory.components.steps.sampling import EpochPlan, Step
from loaderfactory.components.workers.lifecycle import stopping_together
from loaderfactory.components.workers.processes import ProcessWorkers
from loaderfactory.components.workers.threads import ThreadWorkers
from loaderfactory.components.workers.torch_internals import pin_memory

Pool = ThreadWorkers[Step, Any] | ProcessWorkers[Step, Any]


class PassOwner(Protocol):
    """What a pass asks of the loader that started it (a ``ShardedDataLoader``) and tells it."""

    @property
    def load(self) -> Callable[[Step], Any]:
        """Loads one step in this thread, when the pass has no pool."""
        ...

    @property
    def persistent_workers(self) -> bool:
        """Keep the pool after a complete pass."""
        ...

    def _delivered(self, plan: EpochPlan, position: int) -> None:
        """The pass has handed out the batches of ``plan``'s steps before ``position``."""

    def _finished(self, plan: EpochPlan) -> None:
        """The pass handed out every batch of ``plan``."""


class LoadStep:
    """Load and collate one step: a batch, or one batch per shard when the step is a list of lists.

    The task of the loader's workers; process workers started by ``spawn`` or ``forkserver`` need
    it (so the dataset and collate) picklable.
    """

    def __init__(self, dataset: Any, collate: Callable[[list[Any]], Any]) -> None:
        self.dataset = dataset
        self.collate = collate

    def __call__(self, step: Step) -> Any:
        if step and isinstance(step[0], list):
            return [self.collate(self._items(shard)) for shard in step]
        return self.collate(self._items(step))

    def _items(self, indices: Any) -> list[Any]:
        """``[dataset[i] for i in indices]``, by the dataset's ``__getitems__`` where it has one (as
        torch's fetcher does)."""
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:
            return getitems(indices)  # type: ignore[no-any-return]  # the dataset's own items
        return [self.dataset[i] for i in indices]


class Pass:
    """The batches of ``plan`` from step ``start`` on, in order, loaded by ``pool`` (or in this thread).

    An abandoned pass (early ``break``, ``close()``, garbage collection) stops its workers; a
    complete one stops them too unless the loader keeps persistent workers. ``pin``: pin the
    batches' memory (process workers pin on torch's pin-memory thread instead).
    """

    def __init__(
        self, owner: PassOwner, plan: EpochPlan, start: int, pool: Pool | None, *, pin: bool
    ) -> None:
        self.owner = owner
        self.plan = plan
        self.pool = pool
        self.position = start
        self.total = len(plan.steps) - start
        self.done = False
        steps = plan.steps[start:]
        self._batches: Iterator[Any] = map(owner.load, steps) if pool is None else pool.run(steps)
        # Process workers pin on torch's pin-memory thread; batches loaded here are pinned here.
        self._pin = pin and not isinstance(pool, ProcessWorkers)
        self._finalizer = weakref.finalize(self, pool.close) if pool is not None else None

    def __iter__(self) -> Pass:
        return self

    def __next__(self) -> Any:
        if self.done:
            raise StopIteration
        try:
            batch = next(self._batches)
        except StopIteration:
            self._complete()
            raise
        except BaseException:
            # The error reaches the loop first: the workers are stopped without waiting for them.
            with stopping_together(wait=False):
                self.close()
            raise
        self.position += 1
        self.owner._delivered(self.plan, self.position)
        return pin_memory(batch) if self._pin else batch

    def _complete(self) -> None:
        self.done = True
        self.owner._finished(self.plan)
        if self._finalizer is not None:
            if self.owner.persistent_workers:
                self._finalizer.detach()
            else:
                self._finalizer()

    def close(self) -> None:
        """Stop this pass (and its workers, unless the epoch completed with persistent workers)."""
        self.done = True
        if self._finalizer is not None:
            self._finalizer()
