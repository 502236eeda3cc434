"""Opening and reading a local tar shard: the header scan and the per-sample read, in µs per sample.

For each ``.tar`` in ``--folder`` (the first ``--shards``): the best of ``--repeats`` scans of its
headers (:func:`loaderfactory.shards.formats.tar.shard.scan_tar`: the dense numpy walk where it applies,
else the walk header by header), and the best of ``--repeats`` reads of all its samples in runs of
32 (``TarShard.sample_run``, decoding included). The page cache is warm after the first repeat.

    python benchmarks/bench_tar_open.py --folder /tmp/bench_shards_data/scale-1.0-64.0/ours/4KB

Another checkout side by side: ``PYTHONPATH=<checkout> python benchmarks/bench_tar_open.py ...``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from loaderfactory.shards.formats.tar.shard import TarShard, scan_tar
from loaderfactory.shards.storage.store import Storage

try:
    from loaderfactory.shards.formats.tar.headers import walk_dense
except ImportError:  # a checkout from before it, measured side by side (--before)
    walk_dense = None


def best_seconds(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", required=True)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    storage = Storage()
    print("| shard | samples | dense walk | scan ms | scan µs/sample | read µs/sample |")
    print("|---|---:|---|---:|---:|---:|")
    for path in sorted(Path(args.folder).glob("*.tar"))[: args.shards]:
        url = str(path)
        with path.open("rb") as file:
            dense = walk_dense is not None and walk_dense(file, path.stat().st_size) is not None
        scan = best_seconds(lambda url=url: scan_tar(storage, url), args.repeats)
        shard = TarShard(storage, url)
        count = len(shard)

        def read_all(shard: TarShard = shard, count: int = count) -> None:
            for first in range(0, count, 32):
                shard.sample_run(first, min(32, count - first))

        read = best_seconds(read_all, args.repeats)
        print(
            f"| {path.name} | {count} | {'yes' if dense else 'no'} | {scan * 1e3:.1f} | "
            f"{scan / count * 1e6:.2f} | {read / count * 1e6:.2f} |"
        )


if __name__ == "__main__":
    main()
