"""The ``pack`` section: where and how ``run.mode=pack`` writes the dataset as shards."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from loaderfactory.config.specs.base import NumWorkers, Seed, Spec
from loaderfactory.sizes import SIZE_PATTERN, parse_size


def _size(value: Any) -> Any:
    if isinstance(value, str):
        value = int(parse_size(value))
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a size like '256MiB' or a number of bytes ≥ 1, got {value!r}")
    return value


_SIZE_SCHEMA = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": SIZE_PATTERN}]}
ByteCount = Annotated[int, BeforeValidator(_size), WithJsonSchema(_SIZE_SCHEMA)]
"""Bytes, written as an int or a size string (``"256MiB"``, parsed with pydantic's ``ByteSize`` units)."""
ImageFormat = Literal["jpg", "jpeg", "png", "webp"]
"""The image extensions ``pack`` stores encoded; the shards reader decodes the same ones."""
LOSSY = ("jpg", "jpeg", "webp")
_FORMATS = list(get_args(ImageFormat))


class ImageEncodingSpec(Spec):
    """How ``pack`` stores one image field: bytes as they are under ``format`` (checked to be that
    format), a PIL image encoded as ``format`` (jpg and webp at ``quality``)."""

    format: ImageFormat
    quality: Annotated[int, Field(ge=1, le=100, strict=True)] | None = None
    """1-100 for a PIL image written as jpg or webp; null: 95. Not for png (lossless) nor for bytes."""

    @model_validator(mode="after")
    def _quality_is_lossy(self) -> ImageEncodingSpec:
        """quality is for the lossy formats, jpg and webp (png is lossless)."""
        if self.quality is not None and self.format not in LOSSY:
            raise ValueError(f"quality applies to jpg and webp, not {self.format} (lossless); drop it")
        return self


def _short_form(value: Any) -> Any:
    """``jpg`` is ``{format: jpg}``."""
    return {"format": value} if isinstance(value, str) else value


ImageEncoding = Annotated[
    ImageEncodingSpec,
    BeforeValidator(_short_form),
    WithJsonSchema(
        {
            "anyOf": [
                {"enum": _FORMATS},
                {
                    "type": "object",
                    "properties": {
                        "format": {"enum": _FORMATS},
                        "quality": {
                            "anyOf": [{"type": "integer", "minimum": 1, "maximum": 100}, {"type": "null"}]
                        },
                    },
                    "required": ["format"],
                    "additionalProperties": False,
                },
            ]
        }
    ),
]
"""An image field's encoding: ``jpg`` or ``{format: jpg, quality: 90}``."""


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
    encode: dict[str, ImageEncoding] = {}
    """Image fields stored encoded, field → `jpg`/`jpeg`/`png`/`webp` or `{format: jpg, quality: 90}`:
    bytes kept as they are (checked to be that format), PIL images encoded so."""

    shuffle: bool = False
    """Write the items in a random order seeded by `seed` (keys stay the items' dataset indices)."""
    seed: Seed = 0
    """The seed of `shuffle`'s order."""


def image_encodings(encode: Any) -> dict[str, ImageEncodingSpec]:
    """``pack``'s ``encode`` argument validated: field → :class:`ImageEncodingSpec`.

    Raises:
        ValueError: naming the field and what is wrong with it.
    """
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(dict[str, ImageEncoding]).validate_python(encode)
    except ValidationError as err:
        problems = "; ".join(
            f"encode{''.join(f'.{part}' for part in e['loc'])}: {e['msg']} (got {e['input']!r})"
            for e in err.errors()
        )
        raise ValueError(problems) from err
