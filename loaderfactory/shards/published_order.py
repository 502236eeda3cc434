"""Tell a dataset's DataLoader workers which epoch order the reads follow, so they predownload by it.

The order is computed where the sampler runs (usually the main process), after the workers were
started (forked or spawned, persistent or not); the workers hold copies of the dataset made before.
The order is a pure function of ``(seed, epoch)`` and the shards, so the process computing it only
writes those two numbers to a small file in the dataset's private folder (written aside, renamed
into place), before it hands out the epoch's first index; a worker looks at the file's identity
(inode and mtime, one ``stat``) on each read and recomputes the order when it changed.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

NAME = "epoch-order.json"


class PublishedOrder:
    """``(seed, epoch)`` of the order being read, shared through the file ``folder/epoch-order.json``."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / NAME
        self._seen: tuple[int, int] | None = None  # the file's (inode, mtime) last read
        self._value: tuple[int, int] | None = None

    def publish(self, seed: int, epoch: int) -> None:
        """Make ``(seed, epoch)`` what every copy of this object reads next (atomic: a rename)."""
        partial = self.path.with_name(f".{NAME}.{os.getpid()}.partial")
        with contextlib.suppress(FileNotFoundError):  # the folder went with a closed dataset
            partial.write_text(json.dumps({"seed": seed, "epoch": epoch}))
            os.replace(partial, self.path)

    def read(self) -> tuple[int, int] | None:
        """The ``(seed, epoch)`` published last; None before any."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None
        seen = (stat.st_ino, stat.st_mtime_ns)
        if seen != self._seen:
            with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
                value = json.loads(self.path.read_text())
                self._value, self._seen = (int(value["seed"]), int(value["epoch"])), seen
        return self._value

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_seen": None, "_value": None}
