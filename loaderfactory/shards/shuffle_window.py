"""How many shards a shuffled epoch mixes at once (``shuffle_window``), and what that window holds.

``shuffle_window="auto"`` (the default) takes as many of the largest shard as fit in
``shuffle_memory`` bytes, between 1 and :data:`MOST_AUTO` and at most every shard. The window
depends on the shards' sizes and the budget alone (not on ``open_shards``, the cache or the world
size), so the epoch's order stays a pure function of ``(seed, epoch, shards, window settings)``
and a resumed or re-split run reads the same order.

What the window holds: a shuffled epoch reads the window's shards together, so their bytes are held
at once: in the OS page cache for local shards (``local_read_ahead`` reads each one opened whole),
in the cache for remote ones (fetched whole); every process keeps the window's shards open.
"""

from __future__ import annotations

from collections.abc import Sequence

from loaderfactory.shards.storage.cache import human_bytes

AUTO = "auto"
DEFAULT_SHUFFLE_MEMORY = 4 * 2**30
"""``shuffle_memory``'s default, 4 GiB (mirrors the spec's, which cannot import this package)."""
MOST_AUTO = 64
"""The widest automatic window: 64 open shards per process (file handles and tar header tables)."""
FEW_SHARDS_PER_BATCH = 6.0
"""Below this many distinct shards expected in a shuffled batch (or half the batch, if smaller),
``run.mode=plan`` warns: on data stored in class order such batches hold few classes."""
DEFAULT_OPEN_SHARDS = 4
"""``open_shards`` when not given, or the window when wider."""


def resolve_window(window: int | str, shard_bytes: Sequence[int], memory: int) -> int:
    """The window in shards: ``window`` itself, or for ``"auto"`` as many of the largest of
    ``shard_bytes`` as fit in ``memory`` (1 to :data:`MOST_AUTO`, at most every shard).

    Raises:
        ValueError: a window that is neither ``"auto"`` nor a count ≥ 1, or ``memory`` < 1.
    """
    if memory < 1:
        raise ValueError(f"shuffle_memory must be ≥ 1 byte, got {memory}")
    if window == AUTO:
        largest = max(shard_bytes, default=0) or 1
        return max(1, min(len(shard_bytes), MOST_AUTO, memory // largest))
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"shuffle_window must be 'auto' or ≥ 1, got {window!r}")
    return window


def window_bytes(shard_bytes: Sequence[int], window: int) -> int:
    """The most bytes one window of ``window`` shards can hold: its largest shards together."""
    return sum(sorted(shard_bytes, reverse=True)[:window])


def shards_per_batch(window: int, batch_size: int) -> float:
    """Distinct shards expected among ``batch_size`` samples drawn from a window of ``window``
    equally large shards: ``window × (1 − (1 − 1/window)^batch_size)``."""
    if window <= 1 or batch_size <= 1:
        return 1.0
    return window * (1 - (1 - 1 / window) ** batch_size)


def few_shards_per_batch(batch_size: int) -> float:
    """The fewest distinct shards a shuffled batch should see before the plan warns."""
    return min(FEW_SHARDS_PER_BATCH, batch_size / 2)


def window_for(batch_size: int, shards: int) -> int:
    """The narrowest window whose batches see :func:`few_shards_per_batch` shards or more (at most
    every shard)."""
    wanted = few_shards_per_batch(batch_size)
    window = 1
    while window < shards and shards_per_batch(window, batch_size) < wanted:
        window += 1
    return window


def window_problem(
    window: int, setting: int | str, open_shards: int, remote_bytes: Sequence[int], cache_limit: int | None
) -> str | None:
    """Why a shuffled epoch could not hold its ``window`` (set as ``setting``): ``open_shards`` below
    it, or a set ``cache_limit`` below the bytes of its remote shards (``remote_bytes``); None when
    it can."""
    how = f"shuffle_window={window}" + (" (auto, from shuffle_memory)" if setting == AUTO else "")
    if open_shards < window:
        return (
            f"open_shards={open_shards} is below {how}: a shuffled epoch would reopen a shard"
            f" for nearly every sample; set open_shards ≥ {window} or leave it unset (it follows"
            f" the window), or set shuffle_window ≤ {open_shards}"
        )
    held = window_bytes(remote_bytes, window)
    if cache_limit is not None and remote_bytes and cache_limit < held:
        return (
            f"cache.limit {human_bytes(cache_limit)} cannot hold {how}: its shards take up to"
            f" {human_bytes(held)}; raise cache.limit to {human_bytes(held)} or lower"
            " shuffle_memory / shuffle_window"
        )
    return None


def uniform_order_cost(shards: int, open_shards: int, window: int) -> str | None:
    """What a uniform shuffle of ``shards`` costs beside the window order; None: nothing, every
    shard staying open or one window spanning them all."""
    if shards <= open_shards or window >= shards:
        return None
    return (
        f"nearly every sample opens one of its {shards} shards again"
        f" (open_shards={open_shards}) instead of each shard once an epoch"
    )
