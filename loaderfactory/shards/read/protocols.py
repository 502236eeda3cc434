"""What a process's shard reader reads from its dataset, and what batch reads read through: two
protocols, so that the dataset, its reader and the batch readers import none of each other back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from loaderfactory.components.epoch_announce import EpochTag
from loaderfactory.shards.formats.decode import Decode
from loaderfactory.shards.formats.item_layout import SampleShape
from loaderfactory.shards.index.shard_index import ShardInfo
from loaderfactory.shards.read.cached_shard import Shard
from loaderfactory.shards.stats import ShardStats
from loaderfactory.shards.storage.cache import ShardCache
from loaderfactory.shards.storage.store import Storage


class ReadSource(Protocol):
    """What a :class:`~loaderfactory.shards.read.reader.ShardReader` reads: the shards, how their samples
    become items, and the settings of its open shards and background reads
    (a :class:`~loaderfactory.shards.dataset.ShardsDataset`)."""

    @property
    def shards(self) -> Sequence[ShardInfo]: ...

    @property
    def ends(self) -> Sequence[int]:
        """The shards' cumulative sample counts."""
        ...

    @property
    def storage(self) -> Storage: ...

    @property
    def decode(self) -> Decode: ...

    @property
    def shape(self) -> SampleShape: ...

    @property
    def counters(self) -> ShardStats: ...

    @property
    def open_shards(self) -> int: ...

    @property
    def predownload(self) -> int: ...

    @property
    def local_read_ahead(self) -> bool: ...

    @property
    def shuffle_window(self) -> int: ...

    @property
    def epoch_tag(self) -> EpochTag | None:
        """The epoch being read; None: none numbered yet (stored order)."""
        ...

    def __len__(self) -> int: ...

    def locate(self, index: int) -> tuple[int, int]:
        """(shard number, sample number inside it) of global sample ``index``; IndexError outside."""
        ...

    def shard_cache(self) -> ShardCache | None:
        """The cache remote shards are fetched into; None: they are read in place."""
        ...

    def index_again(self, url: str) -> str:
        """What to do about an index that no longer matches the shard ``url``."""
        ...


class BatchSource(Protocol):
    """What :func:`~loaderfactory.shards.read.batch.read_batch` reads a batch through (a
    :class:`~loaderfactory.shards.read.reader.ShardReader`)."""

    @property
    def shards(self) -> Sequence[ShardInfo]: ...

    @property
    def ends(self) -> Sequence[int]: ...

    @property
    def shape(self) -> SampleShape: ...

    @property
    def counters(self) -> ShardStats: ...

    def __len__(self) -> int: ...

    def read_sample(self, index: int) -> Any:
        """Sample ``index`` as read, before transforms; raises naming the shard and the sample."""
        ...

    def open_run(self, shard: int, first: int, last: int) -> Shard:
        """Shard ``shard`` opened for reading global samples ``first`` to ``last``; its failure
        raised as reading sample ``first`` raises it."""
        ...
