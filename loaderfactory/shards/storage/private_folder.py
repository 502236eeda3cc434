"""A dataset's own temporary folder: its remote shards' cache when no ``cache.dir`` is set.

Created in the process that builds the dataset, so worker processes forked or spawned later find it
(its path travels with the pickled dataset). Named ``loaderfactory-shards-<pid>-<random>`` in the
system's temporary folder (``TMPDIR``). Removed, in the process that created it only, by
:meth:`PrivateFolder.remove` (the dataset's ``close()``), when the object is collected, and at
interpreter exit; a process killed before any of these leaves its folder behind, and the next
:class:`PrivateFolder` created on the machine removes folders whose process is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

PREFIX = "loaderfactory-shards-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-")


class PrivateFolder:
    """A temporary folder owned by this process; a copy in another process never removes it."""

    def __init__(self) -> None:
        remove_stale(Path(tempfile.gettempdir()))
        self.owner = os.getpid()
        self.path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{self.owner}-"))
        self._finalizer = weakref.finalize(self, _remove, self.path, self.owner)

    def remove(self) -> None:
        """Delete the folder and all in it (in the creating process; elsewhere: nothing)."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None and self.owner == os.getpid():
            finalizer()

    @property
    def removed(self) -> bool:
        """True once :meth:`remove` ran, in the creating process (always False elsewhere: a copy,
        spawned or forked, never makes the folder again)."""
        finalizer = getattr(self, "_finalizer", None)
        return finalizer is not None and not finalizer.alive and self.owner == os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        # A copy in a spawned worker carries no finalizer: only the creating process removes.
        return {"owner": self.owner, "path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def _remove(path: Path, owner: int) -> None:
    """Remove ``path`` when called in ``owner``: a forked child runs its copy of the finalizer at
    collection too, and must leave its parent's folder alone."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def remove_stale(folder: Path) -> list[Path]:
    """Remove this user's private folders in ``folder`` whose creating process is no longer alive.

    A folder whose pid now belongs to another live process is kept (it is removed once that one
    is gone too). Returns the folders removed.
    """
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            found = _NAME.match(entry.name)
            if found is None or not entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == os.getuid() and not _alive(int(found[1])):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
