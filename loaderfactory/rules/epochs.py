"""Epochs that give some rank no batch at all: a run over them trains on nothing and says nothing.

Pure arithmetic on sizes, the same as the loaders' own counts (``components/order.py``:
``rank_count``; ``components/steps/sampling.py``: ``count``), so the spec can refuse a config
before anything is built and the ``Loader`` after building, with one message, when the length is
known only then. ``length_source`` names where the length comes from (``dataset.length``, or
``len(dataset)`` once built).
"""

from __future__ import annotations

from loaderfactory.rules import Problem


def smallest_share(length: int, world_size: int, balance: str) -> int:
    """Items the rank with the fewest gets of an epoch's ``length`` (``pad`` wraps around)."""
    if balance == "pad":
        return -(-length // world_size)
    return length // world_size  # drop; and uneven, whose ranks past length % world_size get this


def _ranks(world_size: int) -> str:
    return "" if world_size == 1 else f" split between {world_size} ranks (loader.distributed)"


def _no_share(length: int, length_source: str, world_size: int, balance: str) -> Problem:
    if length == 0:
        return (
            "dataset",
            f"{length_source}=0: the dataset is empty: an epoch has no batches; give it items",
            0,
        )
    return (
        "loader.balance",
        f"an epoch gives some rank no batches: {length_source}={length} items{_ranks(world_size)} "
        f"and loader.balance={balance!r} leaves a rank none; use balance 'pad', fewer ranks or more data",
        balance,
    )


def torch_epoch_problems(
    length: int, length_source: str, batch_size: int | None, drop_last: bool, world_size: int, balance: str
) -> list[Problem]:
    """The ``torch`` kind: a rank's items, cut into ``batch_size`` batches, the short one dropped
    with ``drop_last``; ``batch_size`` null yields items one by one."""
    share = smallest_share(length, world_size, balance)
    if share == 0:
        return [_no_share(length, length_source, world_size, balance)]
    if batch_size is None or not drop_last or share >= batch_size:
        return []
    share_text = f", the smallest share {share}," if world_size > 1 else ""
    message = (
        f"an epoch has no batches: {length_source}={length} items{_ranks(world_size)}{share_text} fewer "
        f"than loader.batch_size={batch_size}, and loader.drop_last=true drops them; "
        f"set drop_last: false or batch_size <= {share}, or give more data"
    )
    return [("loader.drop_last", message, True)]


def sharded_epoch_problems(
    length: int,
    length_source: str,
    batch_size: int,
    num_shards: int,
    last_batch: str,
    world_size: int,
    balance: str,
) -> list[Problem]:
    """The ``sharded`` kind: a step is ``num_shards`` batches of ``batch_size`` per rank; ``discard``
    drops a rank's short step, ``rollover`` carries what fills no step of all ranks into the next
    epoch (so the first epoch has none when the data fills no step)."""
    step = batch_size * num_shards
    sizes = f"loader.batch_size={batch_size} × loader.num_shards={num_shards}"
    if last_batch == "rollover":
        block = step * world_size
        if length >= block:
            return []
        message = (
            f"the first epoch has no steps: {length_source}={length} items{_ranks(world_size)}, "
            f"fewer than one step of all ranks ({sizes} × {world_size} = {block}), and "
            "loader.last_batch='rollover' carries them to the next epoch; use last_batch 'keep', a "
            "smaller batch_size, or more data"
        )
        return [("loader.last_batch", message, last_batch)]
    share = smallest_share(length, world_size, balance)
    if share == 0:
        return [_no_share(length, length_source, world_size, balance)]
    if last_batch == "discard" and share < step:
        message = (
            f"an epoch has no steps: {length_source}={length} items{_ranks(world_size)}, a rank "
            f"gets {share}, fewer than one step ({sizes} = {step}), and loader.last_batch='discard' "
            "drops them; use last_batch 'keep' or 'rollover', a smaller batch_size, or more data"
        )
        return [("loader.last_batch", message, last_batch)]
    return []
