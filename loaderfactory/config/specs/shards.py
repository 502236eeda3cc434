"""Spec of the ``shards`` dataset: webdataset tar or Parquet shards on a local disk or in object storage.

Validation only looks: it imports neither torch nor fsspec, and checks that optional packages are
installed with ``importlib.util.find_spec`` (which imports nothing).
"""

from __future__ import annotations

import importlib.util
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, field_validator, model_validator

from loaderfactory.config.specs.base import Count, Spec, broken_rules
from loaderfactory.config.specs.kinds import DatasetKindSpec
from loaderfactory.config.specs.refs import Transforms
from loaderfactory.remote_extras import SCHEME_PACKAGES, install_command
from loaderfactory.sizes import SIZE_PATTERN, parse_size

SHARD_EXTENSIONS = {".tar": "tar", ".parquet": "parquet"}
IMAGES_EXTRA = 'pip install "loaderfactory[images]"'
IMAGES = frozenset({"jpg", "jpeg", "png", "webp"})
"""The image extensions the reader decodes; mirrors ``shards.decode.IMAGE_EXTENSIONS``."""
DEFAULT_SHUFFLE_MEMORY = 4 * 2**30
"""``shuffle_memory``'s default, 4 GiB: 16 shards of ``pack``'s 256 MiB, 64 of 64 MiB."""


def _size(value: Any) -> Any:
    """``"20GiB"`` → bytes; a plain int is bytes already."""
    if isinstance(value, str):
        return int(parse_size(value))
    return value


Size = Annotated[
    int,
    BeforeValidator(_size),
    Field(ge=1, strict=True),
    WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": SIZE_PATTERN}]}
    ),
]
"""Bytes, written as a size string (``20GiB``, ``512MB``) or a whole number of bytes."""


ImageSize = (
    Annotated[int, Field(ge=1, strict=True)]
    | Annotated[list[Annotated[int, Field(ge=1, strict=True)]], Field(min_length=2, max_length=2)]
)
"""A side ≥ 1 (a square) or [height, width]."""


class ShardsCacheSpec(Spec):
    """Where remote shards are kept on local disk, and how much of it they may take."""

    dir: str | None = None
    """Local folder for fetched shards (created; shared by the ranks and workers of a machine, kept
    after the run); null: a private temporary folder per process, removed when the loader closes."""
    limit: Size | None = None
    """Most bytes the cache holds, like 20GiB (least recently used shards go first); null: no bound
    with dir, else what open_shards and predownload need."""


def scheme_of(url: str) -> str:
    """``s3`` for ``s3://b/k``, ``file`` for a local path or ``file://``; else what precedes ``://``."""
    scheme, sep, _ = url.partition("://")
    return scheme if sep else "file"


class ShardsDatasetSpec(DatasetKindSpec):
    """Samples of webdataset ``.tar`` or Parquet shards, local or remote (s3://, gs://, http(s)://).

    A map-style dataset over the shards' index (``loaderfactory-shards.json`` beside them; built and
    saved by ``run.mode=index``, else built on the fly): ``len()`` is exact, every queue/loader kind
    works over it, and ``shuffle: true`` follows its own order (shards permuted per epoch, samples
    mixed within ``shuffle_window`` shards, by default as many as fit in ``shuffle_memory``).
    ``urls``, ``index`` and ``storage_options`` may change on resume (the same shards, moved).
    Shards written by ``pack`` give back the items as packed (``fields: item``); ``fields: raw``
    gives the stored fields by name, as webdataset does.
    """

    location_fields = frozenset({"urls", "index"})
    # None of these changes which samples an epoch reads or in which order.
    speed_only = frozenset(
        {"storage_options", "retries", "open_shards", "cache", "predownload", "fetch", "local_read_ahead"}
    )

    kind: Literal["shards"] = "shards"
    urls: str | list[str]
    """A list, a brace pattern (train-{000000..000127}.tar), a folder or prefix ending in /
    (s3://bucket/train/), or a local glob."""
    format: Literal["auto", "tar", "parquet"] = "auto"
    """Shard format; auto: by extension (.tar, .parquet); tar or parquet: also shards named otherwise."""
    index: str | None = None
    """The index file's URL; null: loaderfactory-shards.json beside the shards (built if absent)."""
    keys: list[str] = []
    """What every sample must have (one without is an error naming its shard and key): the item's
    keys for dict items of packed shards, else stored field names (image.npy)."""
    fields: Literal["item", "raw"] = "item"
    """item: shards written by pack give back each item as packed (a dict with its keys, a tuple, a
    list or a single value), other shards read raw; raw: stored field names (image.npy) plus
    __key__ and __url__ for every shard (the webdataset convention)."""
    metadata: bool = False
    """Add __key__ and __url__ to the dict items of packed shards (raw samples always have them);
    refused for tuple, list and single-value items."""
    decode: bool | list[str] = True
    """true: decode by extension (npy, pt, json, txt, cls, jpg, ...); false: bytes; a list: only
    those extensions."""
    image_size: ImageSize | None = None
    """Decoded images (jpg, png, webp) come out this size: 224 (square) or [height, width], so they
    stack in a batch; JPEGs are scaled down while decoding (Pillow's draft), then resized (bilinear).
    null: as stored."""
    image_mode: Literal["RGB", "L", "RGBA"] | None = None
    """Decoded images in this mode: RGB (3 channels), L (1), RGBA (4); null: as stored (RGB 3,
    grayscale 1)."""
    storage_options: dict[str, Any] = {}
    """Remote storage settings (endpoint_url, key, secret, region, ...); else the AWS environment."""
    retries: Annotated[int, Field(ge=0, strict=True)] = 3
    """Retries of a failing remote read, with exponential backoff."""
    open_shards: Count | None = None
    """Shards kept open at once per process, at least shuffle_window; null: the window, at least 4."""
    shuffle_window: Count | Literal["auto"] = "auto"
    """Shards whose samples a shuffled epoch mixes at a time: larger mixes better, holds more shards;
    auto: as many of the largest shard as fit in shuffle_memory (1 to 64, at most every shard)."""
    shuffle_memory: Size = DEFAULT_SHUFFLE_MEMORY
    """Bytes of shards shuffle_window auto may hold at once, like 4GiB: the page cache the window's
    local shards are read into, or the cache space its remote shards take."""
    fetch: Literal["whole", "range"] = "whole"
    """whole: a remote shard is fetched whole into the cache once and read locally by all workers;
    range: every read is a byte-range request, nothing cached (sparse reads of huge shards only)."""
    cache: ShardsCacheSpec | None = None
    """Local cache of remote shards {dir: a folder or null, limit: a size like 20GiB or null}; null:
    a private temporary folder bounded to what open_shards and predownload need."""
    predownload: Annotated[int, Field(ge=0, strict=True)] = 0
    """Samples ahead (per rank) whose shards are fetched into the cache in the background (the next
    two shards always among them); 0: none."""
    transforms: Transforms = None
    """Applied to each sample after it is read, in the worker reading it: one transform or a list in
    order (registered kinds or _target_ callables); random ones draw per sample, seeded by the root
    seed (else the shuffle's), the epoch and the sample's index, so runs and resumes repeat them."""
    local_read_ahead: bool = True
    """Local shards: a background thread reads each shard opened into the OS page cache, and the
    next one when shards are read in stored order (then also opening it: its headers walked), so
    reads from a cold disk and header walks overlap decoding. Page-cache reads are off where the
    ranks span machines (WORLD_SIZE above LOCAL_WORLD_SIZE, SLURM_NNODES above 1)."""

    @field_validator("urls")
    @classmethod
    def _urls_readable(cls, urls: str | list[str]) -> str | list[str]:
        """Non-empty; each URL of a scheme we read (local, file://, s3://, gs://, http(s)://)."""
        listed = [urls] if isinstance(urls, str) else urls
        if not listed or any(not url.strip() for url in listed):
            raise ValueError("must name at least one shard, folder or pattern; no empty URL")
        for url in listed:
            scheme = scheme_of(url)
            if scheme != "file" and scheme not in SCHEME_PACKAGES:
                known = ", ".join(f"{s}://" for s in SCHEME_PACKAGES)
                raise ValueError(
                    f"{url!r}: unsupported scheme {scheme!r}; use a local path, file://, {known}"
                )
            missing = [p for p in ("fsspec", SCHEME_PACKAGES.get(scheme)) if p and not _installed(p)]
            if scheme != "file" and missing:
                raise ValueError(
                    f"{url!r}: {scheme}:// URLs need {' and '.join(missing)}, not installed: "
                    f"{install_command(scheme)}"
                )
        return urls

    @field_validator("decode")
    @classmethod
    def _bare_extensions(cls, decode: bool | list[str]) -> bool | list[str]:
        """Extensions are written without their dot: ``[npy, json]``."""
        if isinstance(decode, list):
            dotted = [ext for ext in decode if ext.startswith(".") or not ext]
            if dotted:
                raise ValueError(f"write extensions without a dot, e.g. [npy, json]; got {dotted[0]!r}")
        return decode

    @model_validator(mode="after")
    def _fields_agree(self) -> ShardsDatasetSpec:
        """The format matches the URLs and is readable; enough shards stay open for the window."""
        problems = self._format_problems()
        window = self.shuffle_window
        if self.open_shards is not None and window != "auto" and self.open_shards < window:
            message = (
                f"must be ≥ shuffle_window ({window}): a window's samples come from all its"
                f" shards, fewer open ones reopen shards constantly; set open_shards={window} or null"
            )
            problems.append(("open_shards", message, self.open_shards))
        problems += self._image_problems()
        if self.fetch == "range" and self.predownload:
            message = "fetches shards into the cache, but fetch: range has none; set fetch: whole"
            message += " or predownload: 0"
            problems.append(("predownload", message, self.predownload))
        if self.fetch == "range" and self.cache is not None:
            message = "holds shards fetched whole, but fetch is range; set fetch: whole or cache: null"
            problems.append(("cache", message, self.cache.model_dump()))
        if problems:
            raise broken_rules(type(self).__name__, problems)
        return self

    def _image_problems(self) -> list[tuple[str, str, Any]]:
        """image_size and image_mode need images decoded, and Pillow to decode them."""
        problems: list[tuple[str, str, Any]] = []
        for field, value in (("image_size", self.image_size), ("image_mode", self.image_mode)):
            if value is None:
                continue
            decoded = self.decode if isinstance(self.decode, bool) else bool(set(self.decode) & IMAGES)
            if not decoded:
                message = "applies to decoded images, but decode leaves jpg/png/webp as bytes; add them"
                problems.append((field, f"{message} to decode or drop {field}", value))
            elif not _installed("PIL"):
                problems.append((field, f"decoding images needs Pillow: {IMAGES_EXTRA}", value))
        return problems

    def _format_problems(self) -> list[tuple[str, str, Any]]:
        listed = [self.urls] if isinstance(self.urls, str) else self.urls
        problems: list[tuple[str, str, Any]] = []
        for number, url in enumerate(listed):
            found = next((f for ext, f in SHARD_EXTENSIONS.items() if url.endswith(ext)), None)
            if found and self.format != "auto" and found != self.format:
                path = "urls" if isinstance(self.urls, str) else f"urls.{number}"
                message = f"is a {found} shard but format is {self.format}; set format: auto or {found}"
                problems.append((path, message, url))
        parquet = self.format == "parquet" or any(url.endswith(".parquet") for url in listed)
        if parquet and not _installed("pyarrow"):
            problems.append(
                ("format", 'Parquet shards need pyarrow: pip install "loaderfactory[parquet]"', self.format)
            )
        return problems


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None
