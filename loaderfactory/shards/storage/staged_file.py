"""A file that appears at its path only once written whole, and leaves nothing if its writer dies."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def staged_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write; on a clean exit of the block its content appears at ``path`` at once.

    Written unnamed (Linux ``O_TMPFILE``) and linked into place at the end, so a process killed
    mid-write (a DataLoader worker stopped after another worker's error, an OOM kill) leaves nothing
    in the folder. Where the system or filesystem has no unnamed files, it is written as
    ``.<name>.<pid>.partial`` and renamed, and the partial file is removed on any error raised here.
    The caller keeps other writers of ``path`` out (a lock): an existing ``path`` is replaced.
    """
    fd = _unnamed_file(path.parent)
    if fd is not None:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            path.unlink(missing_ok=True)
            _link(out.fileno(), path)
        return
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as out:
            yield out
        os.replace(partial, path)
    except BaseException:  # a full disk or Ctrl-C: leave no half-written file behind
        partial.unlink(missing_ok=True)
        raise


def _unnamed_file(folder: Path) -> int | None:
    """A writable descriptor of a new file without a name in ``folder``; None where unsupported."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return os.open(folder, flag | os.O_WRONLY, 0o644)
    except OSError:  # EOPNOTSUPP, EISDIR on old kernels: a filesystem without unnamed files
        return None


def _link(fd: int, path: Path) -> None:
    """Give the unnamed file ``fd`` the name ``path``: ``linkat`` following ``/proc/self/fd/<fd>``
    (``os.link`` follows the symlink only when given a directory descriptor)."""
    proc = os.open("/proc/self/fd", os.O_RDONLY)
    try:
        os.link(str(fd), path, src_dir_fd=proc)
    finally:
        os.close(proc)
