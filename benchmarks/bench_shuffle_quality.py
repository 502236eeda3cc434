"""How well the shards kind's ``shuffle_window`` order mixes, next to a full random permutation and
to a py1e-like order (Mosaic streaming's default shuffle) at the same window; and, with
``--versus-mosaic``, our default shuffle next to Mosaic's default py1e read, at the same memory.

    python benchmarks/bench_shuffle_quality.py [--shards 1000] [--samples 1000] [--span 1000]
    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/bench_shuffle_quality.py --versus-mosaic

``--versus-mosaic`` is in :mod:`bench_shuffle_versus` (its docstring says what it measures).

Prints one row per order, over ``--shards`` shards of ``--samples`` samples each:

* ``spearman``: rank correlation of the epoch's order with the stored order (0: no trace of it);
* ``same shard``: share of neighbouring samples that come from the same shard (a uniform
  permutation gives about 1 / shards; reading shards one at a time gives about 1);
* ``shards per span``: distinct shards among ``--span`` consecutive samples, what a reader must
  hold open or cached at once (the cost side of mixing);
* ``ms``: time to compute the order.

``py1e-like`` is our own short re-implementation of the idea of Mosaic's ``py1e`` (one canonical
node, block size ``window × samples`` without its ±25 % jitter): shards permuted, samples shuffled
within each shard, each sample's position moved by a uniform shift of at most half the block, then
sorted. mosaicml-streaming is not installed here (it pins other versions); its own numbers may differ.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from loaderfactory.shards.order import window_order


def py1e_like(counts: list[int], seed: int, epoch: int, window: int) -> np.ndarray:
    """Shards permuted; each shard's samples spread uniformly over a block of ``window`` shards."""
    rng = np.random.default_rng([seed, epoch])
    starts = np.concatenate([[0], np.cumsum(counts)])
    samples, positions, offset = [], [], 0
    block = window * max(counts)
    for shard in rng.permutation(len(counts)):
        size = counts[shard]
        samples.append(rng.permutation(np.arange(starts[shard], starts[shard] + size)))
        reach = max(0.0, (block - size) / 2)
        positions.append(offset + np.arange(size) + rng.uniform(-reach, reach, size))
        offset += size
    return np.concatenate(samples)[np.argsort(np.concatenate(positions), kind="stable")]


def uniform(counts: list[int], seed: int, epoch: int, window: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(sum(counts))


def measure(order: np.ndarray, shard_of: np.ndarray, span: int) -> tuple[float, float, float]:
    spearman = float(np.corrcoef(np.arange(len(order)), order)[0, 1])
    shards = shard_of[order]
    same = float(np.mean(shards[1:] == shards[:-1]))
    spans = [len(np.unique(shards[i : i + span])) for i in range(0, len(shards) - span + 1, span)]
    return spearman, same, float(np.mean(spans))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--span", type=int, default=1000)
    parser.add_argument("--versus-mosaic", action="store_true", help="the table of bench_shuffle_versus.py")
    args, rest = parser.parse_known_args()
    if args.versus_mosaic:
        from bench_shuffle_versus import main as versus

        versus(rest)
        return
    counts = [args.samples] * args.shards
    shard_of = np.repeat(np.arange(args.shards), counts)
    rows: list[tuple[str, Callable[..., np.ndarray], int]] = [("uniform permutation", uniform, 1)]
    for window in (1, 2, 4, 8):
        rows += [
            (f"window_order w={window}", window_order, window),
            (f"py1e-like w={window}", py1e_like, window),
        ]
    print(f"{args.shards} shards × {args.samples} samples, spans of {args.span}")
    print(f"{'order':<22} {'spearman':>9} {'same shard':>11} {'shards per span':>16} {'ms':>7}")
    for name, make, window in rows:
        start = time.perf_counter()
        order = make(counts, 0, 0, window)
        elapsed = (time.perf_counter() - start) * 1000
        spearman, same, spans = measure(order, shard_of, args.span)
        print(f"{name:<22} {spearman:>9.4f} {same:>11.4f} {spans:>16.1f} {elapsed:>7.0f}")


if __name__ == "__main__":
    main()
