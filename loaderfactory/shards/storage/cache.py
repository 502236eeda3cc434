"""A local disk cache of remote shards, shared by every rank and worker process on one machine.

Each version of a remote shard becomes one file ``<16 hex digits>.<its name>`` in the cache folder,
the digits those of sha1 of its URL, byte size and version tag (an ETag or modification time, as the
index says, :meth:`ShardCache.expect`; else as the store says now), beside an empty lock file
``.<that name>.lock`` (deleted with it). A shard replaced in the store (another size or tag) thus has
another name, and is fetched again; a file of an older name is never reused, only evicted (and a
copy named by the URL alone, as before version tags, at the start of a dataset of its shards:
:meth:`ShardCache.evict_unversioned`). Processes
coordinate with ``flock`` locks only:

- fetch: take the shard's lock file exclusively; a shard already there (of the size expected) is
  reused, else the store is asked whether it holds the version expected
  (:class:`~loaderfactory.shards.errors.ShardChangedError` if not), and the shard is written
  unnamed and linked into place only once whole, every byte expected and no more
  (:func:`~loaderfactory.shards.storage.staged_file.staged_file`), so a second process waits, then reuses
  it, and a failed, short or killed fetch leaves nothing;
- use: the cached file is held open with a shared lock while its shard is open
  (:meth:`ShardCache.hold`); each use touches it (its mtime orders the LRU);
- evict: before a fetch, least recently used first until the new shard fits ``limit``; only files
  whose lock file and themselves take an exclusive non-blocking lock (fetched and open nowhere on
  the machine), only names of the pattern above; the lock file goes with the shard (a process
  waiting on a deleted lock file takes the new one instead, see
  :func:`~loaderfactory.shards.storage.cache_files.locked`).

Local and ``file://`` shards never enter the cache: they are read in place. The folder's own
failures (removed, replaced or made read-only while in use) raise
:class:`~loaderfactory.shards.errors.CacheError` naming the folder and the shard's URL.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from loaderfactory.shards.errors import CacheError, CacheLimitError, ShardChangedError, StorageError
from loaderfactory.shards.storage.cache_files import HeldShard, LockFile, evict, lock_path, locked, touch
from loaderfactory.shards.storage.fork_safe import ForkSafeLock
from loaderfactory.shards.storage.object_version import same_version
from loaderfactory.shards.storage.remote_errors import short_answer
from loaderfactory.shards.storage.staged_file import staged_file
from loaderfactory.shards.storage.store import Storage, is_remote, split_scheme

HOLD_ATTEMPTS = 5
"""How often :meth:`ShardCache.hold` fetches again a shard evicted between its fetch and its lock."""
_CACHED_NAME = re.compile(r"^[0-9a-f]{16}\.[^/]+$")
log = logging.getLogger(__name__)


def human_bytes(count: int) -> str:
    """``"1.5 MiB"``-style text of a byte count."""
    value, unit = float(count), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{count} bytes" if unit == "bytes" else f"{value:.1f} {unit} ({count} bytes)"


class Expected(Protocol):
    """What the cache needs of a shard's index entry: its URL, byte size and version tag."""

    @property
    def url(self) -> str: ...
    @property
    def bytes(self) -> int: ...
    @property
    def version(self) -> str: ...


class ShardCache:
    """Fetches remote shards whole into ``dir`` and evicts the least recently used past ``limit``.

    Safe to share between threads, and between processes on one machine (ranks, DataLoader
    workers) through file locks. The counters (``fetched``, ``hits``, ``evicted``,
    ``bytes_fetched``) count this process's work; ``storage.stats`` adds them up across processes,
    with the time readers spent in :meth:`hold`.

    Args:
        dir: the cache folder; created if absent. Checked writable now.
        limit: the most bytes of shards to keep, None for no bound. Shards in use are never evicted,
            so the cache can pass ``limit`` while more than ``limit`` of shards are held open
            (logged); shards being fetched at that moment also come on top of it.
        storage: reads the remote shards (its ``retries`` apply to each range read).
        over_limit_level: the log level of the note that shards in use pass ``limit`` (a warning for
            a limit the user set; a dataset's private folder, bounded by its own estimate, says INFO).
    """

    def __init__(
        self,
        dir: str | os.PathLike[str],
        limit: int | None,
        storage: Storage,
        over_limit_level: int = logging.WARNING,
    ) -> None:
        if limit is not None and limit <= 0:
            raise CacheLimitError(f"cache.limit must be > 0 bytes, got {limit}")
        self.dir, self.limit, self.storage = Path(dir), limit, storage
        self.over_limit_level = over_limit_level
        self.fetched = self.hits = self.evicted = self.bytes_fetched = 0
        self._expected: dict[str, tuple[int, str]] = {}
        self._asked: dict[str, tuple[int, str]] = {}  # the store's answers, for shards indexed untagged
        self._unchecked: set[str] = set()  # shards whose copies are reused only once the store agrees
        self._counts = ForkSafeLock()
        self._check_writable()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_counts"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._counts = ForkSafeLock()

    def _check_writable(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.dir, prefix=".probe-"):
                pass
        except OSError as err:
            raise CacheError(
                f"cache.dir {str(self.dir)!r} is not a writable folder ({err.strerror or err}); "
                "set cache.dir to a folder this user can create and write, or fix its permissions"
            ) from err

    def expect(self, shards: Iterable[Expected], check_reuse: Iterable[str] = ()) -> None:
        """Take the size and version tag of each shard from its index entry: they name its cached
        copy, and a fetch checks the store still holds that version. ``check_reuse``: the URLs
        whose copies are also reused only once the store holds their version (asked once per shard
        and process), those whose entries come from an index that is not the data's own (the one
        :mod:`loaderfactory.shards.index.cached` keeps) rather than from the store at this start."""
        self._expected.update((info.url, (info.bytes, info.version)) for info in shards)
        self._unchecked.update(check_reuse)

    def evict_unversioned(self, urls: Iterable[str]) -> None:
        """Evict the copies of the remote shards ``urls`` named by their URL alone (``<16 hex digits
        of sha1(url)>.<its name>``, as versions of loaderfactory before version tags named them),
        which are never reused now, each unless a process holds or fetches it (:func:`evict`)."""
        names = {self._path(url, None).name for url in urls if is_remote(url)}
        try:
            with os.scandir(self.dir) as entries:
                found = [Path(entry.path) for entry in entries if entry.name in names]
        except OSError as err:  # the folder gone: the fetches name it (CacheError)
            log.warning("cache.dir %s: could not look for copies named the old way: %s", self.dir, err)
            return
        evicted = sum(evict(path) for path in found)
        if evicted:
            self._count("evicted", evicted)
            log.info("cache.dir %s: evicted %d copies named the old way (by URL alone)", self.dir, evicted)

    def path_of(self, url: str) -> Path:
        """Where the version of the remote shard ``url`` that its index gives lives in the cache (for
        a shard not given to :meth:`expect`, the version the store holds now: one request)."""
        return self._path(url, *self._identity(url))

    def holds(self, url: str) -> bool:
        """Whether the copy of ``url`` named by what is known of it is in the cache now (asks the
        store nothing: False where its version is not known yet)."""
        expected = self._expected.get(url)
        known = expected if expected is not None and expected[1] else self._asked.get(url)
        return known is not None and self._path(url, *known).exists()

    def _identity(self, url: str) -> tuple[int, str]:
        """The size and version tag naming ``url``'s copy: its index entry's; the store's (asked once
        in this process) where the entry has no tag (an index written beside local files) or there
        is none; ShardChangedError where the store's size is not the entry's."""
        expected = self._expected.get(url)
        if expected is not None and expected[1]:
            return expected
        asked = self._asked.get(url)
        if asked is None:
            asked = self._asked[url] = self.storage.version(url)
            if expected is not None and asked[0] != expected[0]:
                raise _changed(url, asked, expected)
        return asked

    def _path(self, url: str, size: int | None, version: str = "") -> Path:
        """The copy of ``url`` in ``size`` bytes and ``version``; None: the name of a copy that the
        URL alone named (before version tags)."""
        named = url if size is None else f"{url}\n{size}\n{version}"
        digest = hashlib.sha1(named.encode()).hexdigest()[:16]
        return self.dir / f"{digest}.{url.rstrip('/').rsplit('/', 1)[-1]}"

    def check_fits(self, url: str, size: int) -> None:
        """CacheLimitError naming both sizes when a shard of ``size`` bytes is larger than ``limit``."""
        if self.limit is not None and size > self.limit:
            raise CacheLimitError(
                f"cache.limit {human_bytes(self.limit)} is smaller than the shard {url} "
                f"({human_bytes(size)}); raise cache.limit to a few shards' size"
            )

    def local(self, url: str, cancel: threading.Event | None = None) -> str:
        """The local path of ``url``: a local shard's own path, a remote one's cached copy (fetched now
        if absent, once per machine). ``cancel`` set stops a fetch between ranges (nothing left)."""
        if not is_remote(url):
            return split_scheme(url)[1]
        size, version = self._identity(url)
        path = self._path(url, size, version)
        with self._folder_errors(url), locked(lock_path(path), fcntl.LOCK_EX):
            if self._reusable(path, size):
                if url in self._unchecked:
                    self._check_version(url, size, version)
                self._count("hits", 1)
                return str(path)
            self._check_version(url, size, version)
            self.check_fits(url, size)
            self._make_room(size)
            self._download(url, path, size, cancel)
        return str(path)

    def _reusable(self, path: Path, size: int) -> bool:
        """Whether the cached copy at ``path`` is there and whole (marked used now); a copy of another
        size (damaged on disk) is deleted, to be fetched again. The caller holds its lock."""
        try:
            found = path.stat().st_size
            if found == size:
                touch(path)
                return True
        except FileNotFoundError:  # absent, or evicted just now
            return False
        log.warning("%s holds %d bytes where %d are expected: fetching it again", path, found, size)
        path.unlink(missing_ok=True)
        return False

    def _check_version(self, url: str, size: int, version: str) -> None:
        """ShardChangedError unless the store holds ``url`` in the size and version expected."""
        found = self.storage.version(url)
        if found[0] != size or not same_version(version, found[1]):
            raise _changed(url, found, (size, version))
        self._unchecked.discard(url)

    @contextlib.contextmanager
    def _folder_errors(self, url: str) -> Iterator[None]:
        """Failures of the cache folder itself (a lock or shard file that cannot be made there) as a
        CacheError naming the folder, ``url`` and what to do; other errors (the store's) unchanged."""
        try:
            yield
        except OSError as err:
            if isinstance(err, (CacheError, StorageError)) or not self._in_folder(err):
                raise
            raise CacheError(
                f"cache.dir {str(self.dir)!r}: cannot keep {url} there ({err.strerror or err}: "
                f"{err.filename}); the folder was removed, replaced or made read-only while in use: "
                "make it a writable folder again, or set cache.dir to another one, and run again"
            ) from err

    def _in_folder(self, err: OSError) -> bool:
        names = [name for name in (err.filename, err.filename2) if isinstance(name, (str, os.PathLike))]
        return any(Path(name) == self.dir or Path(name).parent == self.dir for name in names)

    def hold(self, url: str) -> HeldShard:
        """:meth:`local`, with the file locked against eviction until the returned handle is closed."""
        if not is_remote(url):
            return HeldShard(self.local(url), None)
        with self.storage.stats.timed("hold_ns"), self._folder_errors(url):  # hold_ns: the fetch's time
            return self._hold(url)

    def _hold(self, url: str) -> HeldShard:
        for _ in range(HOLD_ATTEMPTS):
            path = self.local(url)
            try:
                held = LockFile.reading(path)
            except FileNotFoundError:
                continue  # evicted by another process between the fetch and the open
            try:
                held.lock(fcntl.LOCK_SH)
                if held.same_file(path):  # not evicted before the lock
                    return HeldShard(path, held)
            except BaseException:
                held.close()
                raise
            held.close()
        raise CacheError(
            f"{url}: evicted from cache.dir {str(self.dir)!r} {HOLD_ATTEMPTS} times before it could be "
            "opened; raise cache.limit (other processes need the space for the shards they read)"
        )

    def _download(self, url: str, path: Path, size: int, cancel: threading.Event | None) -> None:
        """Write ``url`` to ``path`` through a staged file (the caller holds its lock): a fetch that
        fails, or whose process is killed, leaves nothing in the folder."""
        try:
            with staged_file(path) as out:
                self.storage.download(url, out, size, cancel)
                if out.tell() != size:  # raised before the link: the file never gets its name
                    raise short_answer(url, out.tell(), size)
            touch(path)
        except BaseException as err:
            if isinstance(err, OSError) and err.errno == errno.ENOSPC:
                raise CacheError(
                    f"cache.dir {str(self.dir)!r}: no space left for {url} ({human_bytes(size)}); "
                    "lower cache.limit below the free space or free some"
                ) from err
            raise
        self._count("fetched", 1)
        self._count("bytes_fetched", size)

    def _make_room(self, incoming: int) -> None:
        """Evict least recently used, unheld shards until ``incoming`` more bytes fit ``limit``."""
        if self.limit is None:
            return
        with locked(self.dir / ".evict.lock", fcntl.LOCK_EX):
            entries = sorted(self._entries(), key=lambda entry: entry[1].st_mtime_ns)
            total = sum(stat.st_size for _, stat in entries)
            for path, stat in entries:
                if total + incoming <= self.limit:
                    break
                if evict(path):
                    total -= stat.st_size
                    self._count("evicted", 1)
            if total + incoming > self.limit:
                log.log(
                    self.over_limit_level,
                    "cache.dir %s holds %s in shards in use, over cache.limit %s with the next one",
                    self.dir,
                    human_bytes(total),
                    human_bytes(self.limit),
                )

    def _entries(self) -> Iterator[tuple[Path, os.stat_result]]:
        for entry in os.scandir(self.dir):
            if _CACHED_NAME.match(entry.name):
                with contextlib.suppress(FileNotFoundError):
                    yield Path(entry.path), entry.stat()

    def size(self) -> int:
        """Bytes of shards in the cache now."""
        return sum(stat.st_size for _, stat in self._entries())

    def _count(self, name: str, amount: int) -> None:
        with self._counts:
            setattr(self, name, getattr(self, name) + amount)
        self.storage.stats.add(name, amount)


def _changed(url: str, found: tuple[int, str], expected: tuple[int, str]) -> ShardChangedError:
    return ShardChangedError(
        f"{url}: the store holds {found[0]} bytes ({found[1] or 'no version tag'}) where the index "
        f"says {expected[0]} ({expected[1] or 'no version tag'}); the shard changed since it was indexed, "
        "or was copied from another store (a bucket sync, a mirror, a copy: the copy's tags differ "
        "even where its bytes do not, so index the copy (run.mode=index) to read it)"
    )
