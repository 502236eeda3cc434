"""Our default shuffled read of shards next to mosaicml-streaming's default (py1e), at the same memory.

    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/bench_shuffle_versus.py [--set-gb 0.5,20]

For 4 KB and 100 KB items (``--set-gb`` GB of each, 64 MB shards as ``bench_shards.py`` writes
them), the order in which one epoch's samples reach the training loop (batches of ``--batch``; one
rank; 0 and 2 workers):

* ``ours``: ``window_order`` with the window ``shuffle_window: auto`` picks for ``shuffle_memory``
  (default 4 GiB), with the old default (a window of 1 shard), and with ``shuffle_window`` set to
  as many shards as fit in the bytes Mosaic's read holds (``at mosaic's memory``; ``auto`` stops at
  64 shards); workers take consecutive batches of the one order, so it reaches the loop as it is.
* ``mosaic py1e``: Mosaic's own ``get_partitions`` and ``get_shuffle('py1e', ...)`` with its
  defaults (64 canonical nodes on one machine, ``shuffle_block_size`` max(4,000,000 // 64, 2^18),
  ``shuffle_seed`` 9176), the workers' batches interleaved as the DataLoader yields them. Needs
  mosaicml-streaming (the benchmark environment).

Columns: ``same shard``, the share of consecutive samples from the same shard; ``shards/batch``, the
mean distinct shards in a batch; ``held shards`` and ``held``, the most shards (and their bytes)
that are *live* at once: read at least once and still to be read again, which a reader must hold
(cache, page cache or open) not to read a shard twice.

Shard sizes are modelled, not written: a tar sample is 512-byte-padded members with a 512-byte
header each (``x.npy``: the item and a 128-byte npy header; ``cls``: a label), an MDS sample the item
and 16 bytes.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from loaderfactory.shards.order import window_order
from loaderfactory.shards.shuffle_window import DEFAULT_SHUFFLE_MEMORY, resolve_window

SHARD_BYTES = 64_000_000
ITEMS = {"4KB": 4_000, "100KB": 100_000}
MOSAIC_NODES, MOSAIC_SEED = 64, 9176


def tar_sample_bytes(item: int) -> int:
    def member(size: int) -> int:
        return 512 + -(-size // 512) * 512

    return member(item + 128) + member(2)


def shard_counts(samples: int, per_shard: int) -> list[int]:
    full, rest = divmod(samples, per_shard)
    return [per_shard] * full + ([rest] if rest else [])


def mosaic_read(counts: Sequence[int], workers: int, batch: int) -> np.ndarray:
    """Sample ids in the order Mosaic's default shuffled read yields them to the loop."""
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle

    samples = sum(counts)
    block = max(4_000_000 // MOSAIC_NODES, 1 << 18)
    per_worker = max(1, workers)
    ids = get_partitions("orig", samples, MOSAIC_NODES, 1, 1, per_worker, batch)
    shuffle = get_shuffle("py1e", np.array(counts, np.int64), MOSAIC_NODES, MOSAIC_SEED, 0, block)
    ids = np.where(ids != -1, shuffle[ids], -1)[0, 0]  # (workers, batches, batch)
    delivered = ids.transpose(1, 0, 2).reshape(-1)  # the DataLoader takes each worker's batch in turn
    return delivered[delivered != -1]


def measure(
    order: np.ndarray, counts: Sequence[int], shard_bytes: Sequence[int], batch: int
) -> dict[str, float]:
    """Same-shard share, mean distinct shards per batch, and the most shards (and bytes) live at once."""
    shard_of = np.repeat(np.arange(len(counts)), counts)[order]
    same = float(np.mean(shard_of[1:] == shard_of[:-1]))
    cut = len(shard_of) - len(shard_of) % batch
    rows = np.sort(shard_of[:cut].reshape(-1, batch), axis=1)
    per_batch = float(np.mean(1 + np.count_nonzero(np.diff(rows, axis=1), axis=1)))
    _, first = np.unique(shard_of, return_index=True)
    _, from_end = np.unique(shard_of[::-1], return_index=True)
    last = len(shard_of) - 1 - from_end
    sizes = np.asarray(shard_bytes, dtype=np.float64)[np.unique(shard_of)]
    live = np.zeros(len(shard_of) + 1)
    live_bytes = np.zeros(len(shard_of) + 1)
    np.add.at(live, first, 1)
    np.add.at(live, last + 1, -1)
    np.add.at(live_bytes, first, sizes)
    np.add.at(live_bytes, last + 1, -sizes)
    return {
        "same": same,
        "per_batch": per_batch,
        "held_shards": float(np.cumsum(live).max()),
        "held_bytes": float(np.cumsum(live_bytes).max()),
    }


def rows(
    item_name: str, set_bytes: float, batch: int, workers: Sequence[int]
) -> list[tuple[str, dict[str, float]]]:
    item = ITEMS[item_name]
    samples = int(set_bytes // item)
    ours = shard_counts(samples, SHARD_BYTES // tar_sample_bytes(item))
    ours_bytes = [count * tar_sample_bytes(item) for count in ours]
    theirs = shard_counts(samples, SHARD_BYTES // (item + 16))
    theirs_bytes = [count * (item + 16) for count in theirs]
    found: list[tuple[str, dict[str, float]]] = []
    mosaic_memory = 0.0
    for count in workers:
        try:
            figures = measure(mosaic_read(theirs, count, batch), theirs, theirs_bytes, batch)
        except ImportError:
            break
        mosaic_memory = max(mosaic_memory, figures["held_bytes"])
        found.append((f"mosaic py1e, {count} workers", figures))
    largest = max(ours_bytes)
    windows = [
        ("ours, default", resolve_window("auto", ours_bytes, DEFAULT_SHUFFLE_MEMORY)),
        ("ours, window 1 (before)", 1),
    ]
    if mosaic_memory:  # as many shards as mosaic holds bytes: shuffle_window set, as auto stops at 64
        windows.append(("ours at mosaic's memory", max(1, min(len(ours), int(mosaic_memory // largest)))))
    for name, window in windows:
        found.append(
            (f"{name} (w={window})", measure(window_order(ours, 0, 0, window), ours, ours_bytes, batch))
        )
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set-gb", default="0.5,20", help="comma-separated GB of items per set")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", default="0,2")
    args = parser.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",")]
    print(
        f"{'set':<12} {'order':<34} {'same shard':>10} {'shards/batch':>12} {'held shards':>11} {'held':>9}"
    )
    for gigabytes in (float(g) for g in args.set_gb.split(",")):
        for item_name in ITEMS:
            for name, figures in rows(item_name, gigabytes * 1e9, args.batch, workers):
                print(
                    f"{item_name + f' {gigabytes:g}GB':<12} {name:<34} {figures['same']:>10.3f}"
                    f" {figures['per_batch']:>12.1f} {figures['held_shards']:>11.0f}"
                    f" {figures['held_bytes'] / 2**20:>7.0f}Mi"
                )


if __name__ == "__main__":
    main()
