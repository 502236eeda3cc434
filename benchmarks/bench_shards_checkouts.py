"""One epoch of local tar shards through ``build_loader``, items/s, in two checkouts side by side.

    python benchmarks/bench_shards_checkouts.py --before <checkout> [--after .] [--rounds 3]
        [--item-bytes 4096] [--items 40000] [--shuffle 0,1] [--workers 0,2]

Packs ``--items`` float32 tensors of ``--item-bytes`` (4 KB) once into 16 MiB shards, then for each round,
shuffle off and on, 0 and 2 workers, reads a warm-up epoch and a timed epoch (the ``torch`` kind,
batches of 256) in a fresh interpreter of each checkout in turn, and prints each setting's median
items/s per checkout. A change to the read path is compared with the commit before it this way.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

READ = """
import sys, time
from loaderfactory import build_loader
data, shuffle, workers = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
config = {
    "dataset": {"kind": "shards", "urls": data},
    "loader": {"kind": "torch", "batch_size": 256, "shuffle": shuffle, "num_workers": workers},
    "seed": 1,
}
with build_loader(config) as loader:
    for _ in loader:
        pass
    start, items = time.perf_counter(), 0
    for batch in loader:
        items += len(batch["x"] if "x" in batch else batch["x.npy"])  # "x.npy" before the round trip
    print(items / (time.perf_counter() - start))
"""

WRITE = """
import sys, torch
from loaderfactory import pack
size = int(sys.argv[3]) // 4
pack([{"x": torch.full((size,), float(i))} for i in range(int(sys.argv[2]))], sys.argv[1], shard_size="16MiB")
"""


def _run(checkout: Path, code: str, *args: str) -> str:
    """``code`` run with ``checkout``'s loaderfactory: in the checkout, since ``python -c`` puts the
    working directory ahead of ``PYTHONPATH`` (run from another checkout, it would import that one)."""
    folder = str(checkout.resolve())
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**os.environ, "PYTHONPATH": folder},
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the other revision")
    parser.add_argument("--after", type=Path, default=Path("."))
    parser.add_argument("--items", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--item-bytes", type=int, default=4096)
    parser.add_argument("--shuffle", default="0,1", help="comma-separated: 0 stored order, 1 shuffled")
    parser.add_argument("--workers", default="0,2", help="comma-separated worker counts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        data = str(Path(folder) / "shards")
        _run(args.after, WRITE, data, str(args.items), str(args.item_bytes))
        figures: dict[tuple[str, str, str], list[float]] = {}
        settings = list(itertools.product(args.shuffle.split(","), args.workers.split(",")))
        for _ in range(args.rounds):
            for name, checkout in (("before", args.before), ("after", args.after)):
                for shuffle, workers in settings:
                    rate = float(_run(checkout, READ, data, shuffle, workers))
                    figures.setdefault((shuffle, workers, name), []).append(rate)
    print(f"{'shuffle':>7} {'workers':>7} {'before items/s':>15} {'after items/s':>14} {'ratio':>6}")
    for shuffle, workers in settings:
        before = statistics.median(figures[(shuffle, workers, "before")])
        after = statistics.median(figures[(shuffle, workers, "after")])
        print(f"{shuffle:>7} {workers:>7} {before:>15,.0f} {after:>14,.0f} {after / before:>6.2f}")


if __name__ == "__main__":
    main()
