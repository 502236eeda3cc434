"""One measured run of bench_shards.py, in a fresh process: ``python bench_shards_run.py '<run as JSON>'``.

Prints one JSON line: items, data bytes, seconds for the epoch (from building the loader to its last
batch), seconds to the first batch, peak PSS summed over this process and its children (sampled every
0.2 s with psutil), and for ``mode: resume`` the time to the first batch of a fresh loader and of one
resumed at 90% of the epoch (by the library's own resume). Floors: ``floor_tar`` loops over the tar
members of the webdataset shards with ``tarfile``; ``floor_bytes`` reads the files' bytes. A
shuffled epoch (``order: shuffled``) also reports ``same_shard`` and ``ids_exact``
(bench_shards_neighbours.py), worked out after the clock stops. The process runs with
``torch.set_num_threads(1)`` whatever the library: torch's intra-op threads stall the stacking of
batches on a busy 2-core machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_shards_libs import OPENERS
from bench_shards_neighbours import fingerprints, neighbours

RESUME_AT = 0.9


class PeakPss:
    """The largest PSS of this process tree seen by a background sampler, in bytes."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.peak, self.every_s = 0, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        me = psutil.Process()
        total = 0
        for process in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):  # a worker just ended
                total += process.memory_full_info().pss
        self.peak = max(self.peak, total)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.sample()
        return self.peak


def _close(loader: Any) -> None:
    close = getattr(loader, "close", None)
    if close is not None:
        close()


def epoch(run: dict[str, Any]) -> dict[str, Any]:
    reader = OPENERS[run.get("opener", run["library"])](run)
    memory = PeakPss()
    start = time.perf_counter()
    loader = reader.make(None)
    items = data = 0
    first = None
    shuffled = run.get("order") == "shuffled"
    prints: list[np.ndarray] = []
    for batch in loader:
        if first is None:
            first = time.perf_counter() - start
        count, size = reader.batch_items(batch)
        items, data = items + count, data + size
        if shuffled:
            prints.append(fingerprints(reader.batch_data(batch)))
    seconds = time.perf_counter() - start
    _close(loader)
    result = {"items": items, "bytes": data, "seconds": seconds, "first_s": first, "pss": memory.stop()}
    if shuffled:
        result.update(neighbours(run, np.concatenate(prints) if prints else np.zeros(0, np.uint64)))
    return result


def _first_batch_s(reader: Any, state: Any) -> float:
    start = time.perf_counter()
    loader = reader.make(state)
    next(iter(loader))
    seconds = time.perf_counter() - start
    _close(loader)
    return seconds


def resume(run: dict[str, Any]) -> dict[str, Any]:
    reader = OPENERS[run.get("opener", run["library"])](run)
    if reader.save is None:
        return {"na": "no resume: webdataset has no state_dict; a restart reads from the start"}
    fresh = _first_batch_s(reader, None)
    loader = reader.make(None)
    steps = int(run["items"] * RESUME_AT) // run["batch"]
    for number, _ in enumerate(loader, start=1):
        if number == steps:
            break
    state = reader.save(loader)
    _close(loader)
    del loader
    return {"fresh_first_s": fresh, "first_s": _first_batch_s(reader, state), "resumed_at_step": steps}


def floor_tar(run: dict[str, Any]) -> dict[str, Any]:
    start, items, data = time.perf_counter(), 0, 0
    for name in run["shards"]:
        with tarfile.open(os.path.join(run["folder"], name), mode="r:") as archive:
            for member in archive:
                payload = archive.extractfile(member)
                if payload is not None:
                    body = payload.read()
                    if member.name.endswith(".npy"):
                        items, data = items + 1, data + len(body) - 128
    return {"items": items, "bytes": data, "seconds": time.perf_counter() - start, "first_s": None}


def floor_bytes(run: dict[str, Any]) -> dict[str, Any]:
    start, total = time.perf_counter(), 0
    for name in run["shards"]:
        with open(os.path.join(run["folder"], name), "rb", buffering=0) as file:
            while chunk := file.read(8 << 20):
                total += len(chunk)
    return {"items": run["items"], "bytes": total, "seconds": time.perf_counter() - start, "first_s": None}


MODES = {"epoch": epoch, "resume": resume, "floor_tar": floor_tar, "floor_bytes": floor_bytes}

if __name__ == "__main__":
    torch.set_num_threads(1)  # every library alike: intra-op threads stall stacking on 2 busy cores
    spec = json.loads(sys.argv[1])
    print(json.dumps(MODES[spec["mode"]](spec)), flush=True)
