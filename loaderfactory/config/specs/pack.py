"""The ``pack`` section: where and how ``run.mode=pack`` writes the dataset as shards."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, WithJsonSchema

from loaderfactory.config.specs.base import NumWorkers, Seed, Spec, parse_size


def _size(value: Any) -> Any:
    if isinstance(value, str):
        value = int(parse_size(value))
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a size like '256MiB' or a number of bytes ≥ 1, got {value!r}")
    return value


_SIZE_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 1},
        {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*([KMGTkmgt][iI]?[Bb]|[Bb])\s*$"},
    ]
}
ByteCount = Annotated[int, BeforeValidator(_size), WithJsonSchema(_SIZE_SCHEMA)]
"""Bytes, written as an int or a size string (``"256MiB"``, parsed with pydantic's ``ByteSize`` units)."""


class PackSpec(Spec):
    """Writing the dataset as shards (``run.mode=pack``): folder or URL, shard size, format, workers."""

    out: str | None = None
    """Folder or URL (`s3://bucket/prefix`) to write the shards and their index to; required to pack."""
    shard_size: ByteCount = 256 * 2**20
    """The most bytes per shard: a size like `256MiB`, or an int (an item bigger gets a shard alone)."""
    format: Literal["tar", "parquet"] = "tar"
    """`tar` (webdataset) or `parquet` (every item must have the same fields)."""
    num_workers: NumWorkers = 0
    """Worker processes reading and encoding items (map-style datasets only)."""
    storage_options: dict[str, Any] = {}
    """Settings for remote storage (`endpoint_url`, `key`, `secret`, ...)."""
    shuffle: bool = False
    """Write the items in a random order seeded by `seed` (keys stay the items' dataset indices)."""
    seed: Seed = 0
    """The seed of `shuffle`'s order."""
