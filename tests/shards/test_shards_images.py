"""Encoded images through ``pack`` and the shards reader: JPEG bytes kept as they are, PIL images
stored as image files, decoded back to Pillow's pixels (whole, or at ``image_size``), bytes with
``decode: false``; and the mistakes refused, naming the item and field."""

from __future__ import annotations

import io
import re
import sys
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from cli_forks import run_command
from image_data import JpegFolder, photo, write_jpeg_folder
from PIL import Image, ImageDraw

import loaderfactory
from loaderfactory.config.specs.pack import ImageFormat
from loaderfactory.config.specs.shards import IMAGES
from loaderfactory.errors import ArgumentError, ConfigError
from loaderfactory.shards import PackError, ShardError, ShardsDataset, pack
from loaderfactory.shards.formats.decode import IMAGE_EXTENSIONS
from loaderfactory.shards.write.images import PIL_FORMATS, is_format

pytestmark = pytest.mark.usefixtures("cli_forks")  # command runs fork from one interpreter

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"
"""Where the command runs from, so that ``image_data`` is importable as a ``_target_``."""
COUNT = 20
TAR_MEMBER_OVERHEAD = 512 + 511
"""A tar member's most bytes beyond its data: a 512-byte header (no PAX record for short ASCII
names) and padding to 512 bytes."""


@pytest.fixture(scope="module")
def jpeg_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``COUNT`` small JPEGs in four class folders, every fifth one grayscale."""
    root = tmp_path_factory.mktemp("jpegs")
    write_jpeg_folder(root, COUNT)
    return root


def _field(sample: dict[str, Any], key: str) -> Any:
    """A sample's field by the item's key (``image``), whatever extension the reader shows."""
    (name,) = [name for name in sample if name.split(".", 1)[0] == key and not name.startswith("__")]
    return sample[name]


def _pixels(image: Image.Image) -> torch.Tensor:
    """Pillow's pixels as the reader gives them: channels × height × width."""
    array = np.asarray(image)
    return torch.from_numpy((array[None] if array.ndim == 2 else array.transpose(2, 0, 1)).copy())


def _read(urls: str, workers: int, **fields: Any) -> list[dict[str, Any]]:
    """Every sample, unbatched, through ``build_loader`` with ``workers`` worker processes."""
    dataset = {"kind": "shards", "urls": urls, **fields}
    loader = {"kind": "torch", "batch_size": None, "num_workers": workers}
    with loaderfactory.build_loader({"dataset": dataset, "loader": loader}) as samples:
        return list(samples)


def _by_id(samples: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The samples by their ``id`` field, after checking every id came exactly once."""
    ids = Counter(int(_field(sample, "id")) for sample in samples)  # int(b"7"): decode=False too
    assert ids == Counter(range(len(samples))) and len(samples) == COUNT, ids
    return {int(_field(sample, "id")): sample for sample in samples}


def _members(folder: Path) -> dict[str, bytes]:
    """Every member of every tar shard in ``folder``: name → bytes."""
    members: dict[str, bytes] = {}
    for shard in sorted(folder.glob("shard-*.tar")):
        with tarfile.open(shard) as archive:
            for info in archive.getmembers():
                members[info.name] = archive.extractfile(info).read()  # type: ignore[union-attr]
    return members


@pytest.mark.parametrize("workers", [0, 2])
def test_jpeg_bytes_marked_jpg_are_stored_as_they_are(tmp_path: Path, jpeg_root: Path, workers: int) -> None:
    """``encode={"image": "jpg"}`` stores each file's bytes unchanged as ``<key>.image.jpg``: the shards
    hold the files' bytes plus a tar header and padding per member, nothing more."""
    dataset = JpegFolder(str(jpeg_root))
    result = pack(dataset, str(tmp_path), encode={"image": "jpg"}, num_workers=workers, progress=False)
    members = _members(tmp_path)
    for i, path in enumerate(dataset.files):
        assert members[f"{i:06d}.image.jpg"] == path.read_bytes(), path
    files = sum(path.stat().st_size for path in dataset.files)
    assert files < result.bytes <= files + 3 * COUNT * TAR_MEMBER_OVERHEAD + 1024


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_jpeg_shards_decode_to_pillows_pixels(
    tmp_path: Path, jpeg_root: Path, fmt: str, workers: int
) -> None:
    """Read back, each image is exactly what Pillow decodes from its file (RGB 3 channels, grayscale
    1), every id once, with its label."""
    dataset = JpegFolder(str(jpeg_root))
    pack(dataset, str(tmp_path), format=fmt, encode={"image": "jpg"}, progress=False)
    samples = _by_id(_read(f"{tmp_path}/", workers))
    for i, path in enumerate(dataset.files):
        image = _field(samples[i], "image")
        assert isinstance(image, torch.Tensor) and image.dtype == torch.uint8
        with Image.open(path) as stored:
            assert torch.equal(image, _pixels(stored)), path
        assert _field(samples[i], "label") == dataset[i]["label"]
    assert {_field(samples[i], "image").shape[0] for i in samples} == {1, 3}


@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_decode_false_gives_the_files_bytes(tmp_path: Path, jpeg_root: Path, fmt: str) -> None:
    """``decode: false`` reads each image field back as the file's bytes."""
    dataset = JpegFolder(str(jpeg_root))
    pack(dataset, str(tmp_path), format=fmt, encode={"image": "jpg"}, progress=False)
    samples = _by_id(_read(f"{tmp_path}/", 0, decode=False))
    for i, path in enumerate(dataset.files):
        assert _field(samples[i], "image") == path.read_bytes()


def _draft_and_resize(path: Path, height: int, width: int, mode: str) -> torch.Tensor:
    """What Pillow gives for ``path`` drafted (libjpeg's scaled decode) to about ``(height, width)``,
    then resized to it: the reference ``image_size`` should match."""
    with Image.open(path) as image:
        image.draft(mode, (width, height))
        return _pixels(image.convert(mode).resize((width, height), Image.Resampling.BILINEAR))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(("image_size", "shape"), [(20, (20, 20)), ([12, 30], (12, 30))])
def test_image_size_decodes_to_the_target_shape_as_pillows_draft_and_resize(
    tmp_path: Path, jpeg_root: Path, image_size: Any, shape: tuple[int, int], workers: int
) -> None:
    """``image_size`` gives every image the target shape (a batch stacks), within a few levels of
    Pillow's own draft and resize; ``image_mode: RGB`` gives grayscale files 3 channels too."""
    dataset = JpegFolder(str(jpeg_root))
    pack(dataset, str(tmp_path), encode={"image": "jpg"}, progress=False)
    samples = _by_id(_read(f"{tmp_path}/", workers, image_size=image_size, image_mode="RGB"))
    for i, path in enumerate(dataset.files):
        image = _field(samples[i], "image")
        assert image.shape == (3, *shape), path
        difference = (image.float() - _draft_and_resize(path, *shape, "RGB").float()).abs()
        assert difference.mean() < 2 and difference.max() < 64, (path, difference.mean(), difference.max())


def test_draft_decodes_a_large_jpeg_scaled_down(tmp_path: Path) -> None:
    """A JPEG 8× the target size decodes through libjpeg's 1/8 scale: the result equals Pillow's draft
    to that scale, not a full decode resized (which differs)."""
    path = tmp_path / "big.jpg"
    Image.fromarray(photo(1, 256, 320)).save(path, quality=90)
    pack([{"image": path.read_bytes()}], str(tmp_path / "out"), encode={"image": "jpg"}, progress=False)
    (sample,) = _read(f"{tmp_path / 'out'}/", 0, image_size=[32, 40])
    with Image.open(path) as drafted:
        drafted.draft("RGB", (40, 32))
        assert drafted.size == (40, 32)
        assert torch.equal(_field(sample, "image"), _pixels(drafted))


@pytest.mark.parametrize("workers", [0, 2])
def test_pil_images_pack_as_png_and_read_back_equal_pixels(tmp_path: Path, workers: int) -> None:
    """A PIL image made in memory is stored losslessly as ``.png``: its pixels come back exactly (RGB,
    grayscale and RGBA), every id once."""
    modes = ["RGB", "L", "RGBA"]
    items = [{"image": Image.fromarray(photo(i, 9, 13)).convert(modes[i % 3]), "id": i} for i in range(COUNT)]
    pack(items, str(tmp_path), num_workers=workers, progress=False)
    assert all(name.endswith((".image.png", ".id.cls")) for name in _members(tmp_path))
    samples = _by_id(_read(f"{tmp_path}/", workers))
    for i, item in enumerate(items):
        assert torch.equal(_field(samples[i], "image"), _pixels(item["image"])), modes[i % 3]


def test_an_opened_jpeg_keeps_its_file_and_an_edited_one_is_encoded_anew(
    tmp_path: Path, jpeg_root: Path
) -> None:
    """``Image.open(file)`` is stored as the file's bytes (not decoded and re-encoded); one drawn on
    after opening is encoded again, in its own format, and reads back with the edit; ``encode`` asks
    for another format."""
    path = sorted(jpeg_root.glob("class_0/*.jpg"))[0]
    edited = Image.open(path)
    ImageDraw.Draw(edited).rectangle((0, 0, 20, 20), fill=(255, 0, 0))
    items = [
        {"image": Image.open(path)},
        {"image": edited},
        {"image": Image.open(io.BytesIO(path.read_bytes()))},
    ]
    pack(items, str(tmp_path / "own"), progress=False)
    members = _members(tmp_path / "own")
    assert members["000000.image.jpg"] == members["000002.image.jpg"] == path.read_bytes()
    assert members["000001.image.jpg"] != path.read_bytes() and is_format(members["000001.image.jpg"], "jpg")
    back = ShardsDataset(str(tmp_path / "own"))[1]
    assert (
        _field(back, "image")[:, 2:18, 2:18].float() - torch.tensor([255.0, 0, 0])[:, None, None]
    ).abs().mean() < 8

    webp = {"image": {"format": "webp", "quality": 80}}
    pack([{"image": items[0]["image"]}], str(tmp_path / "webp"), encode=webp, progress=False)
    assert [*_members(tmp_path / "webp")] == ["000000.image.webp"]
    assert is_format(_members(tmp_path / "webp")["000000.image.webp"], "webp")
    for item in items:
        item["image"].close()


def test_a_lossy_format_follows_the_asked_quality(tmp_path: Path) -> None:
    """A PIL image asked as jpg is encoded at ``quality`` (95 unless given): a lower one is smaller."""
    image = Image.fromarray(photo(3, 64, 64))
    sizes = {}
    for quality in (None, 95, 30):
        encode = {"image": "jpg" if quality is None else {"format": "jpg", "quality": quality}}
        pack([{"image": image}], str(tmp_path / str(quality)), encode=encode, progress=False)
        sizes[quality] = len(_members(tmp_path / str(quality))["000000.image.jpg"])
    assert sizes[None] == sizes[95] > sizes[30]


def _png_bytes() -> bytes:
    out = io.BytesIO()
    Image.fromarray(photo(0, 4, 4)).save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("item", "encode", "message"),
    [
        (
            {"image": _png_bytes()},
            {"image": "jpg"},
            r"item 3, field 'image': encode marks it jpg, but its bytes are not a jpg file \(they begin "
            r"b'\\x89PNG.*they are a png file: mark the field png",
        ),
        (
            {"image": b"not an image"},
            {"image": "webp"},
            r"item 3, field 'image': .*not a webp file .*give the file's bytes",
        ),
        (
            {"image": torch.zeros(3, 2, 2, dtype=torch.uint8)},
            {"image": "png"},
            r"item 3, field 'image': encode marks it png, but it is a Tensor; give the image file's bytes",
        ),
        (
            {"image": _png_bytes()},
            {"image": {"format": "webp", "quality": 50}},
            r"item 3, field 'image': encode gives quality 50, but bytes are stored as they are",
        ),
        (
            {"picture": _png_bytes()},
            {"image": "png"},
            r"item 3: encode names the field\(s\) \['image'\], which the item lacks "
            r"\(its fields: \['picture'\]\)",
        ),
        (
            {"image": Image.new("RGBA", (2, 2))},
            {"image": "jpg"},
            r"item 3, field 'image': cannot encode a RGBA image as jpg .*convert it in the dataset",
        ),
    ],
)
def test_a_bad_image_field_is_refused_naming_item_and_field(
    tmp_path: Path, item: dict[str, Any], encode: dict[str, Any], message: str
) -> None:
    """A marked field whose value is not that format (or no image), or an image its format cannot
    hold, is refused naming the item and the field; nothing is written."""
    good = {"image": Image.new("RGB", (2, 2))}  # any format takes it
    with pytest.raises(PackError, match=message):
        pack([good, good, good, item], str(tmp_path / "out"), encode=encode, progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("encode", "message"),
    [
        (
            {"image": "gif"},
            r"encode\.image\.format: Input should be 'jpg', 'jpeg', 'png' or 'webp' \(got 'gif'\)",
        ),
        (
            {"image": {"format": "png", "quality": 90}},
            r"encode\.image: .*quality applies to jpg and webp, not png",
        ),
        (
            {"image": {"format": "jpg", "quality": 101}},
            r"encode\.image\.quality: .*less than or equal to 100",
        ),
        ({"image": {"format": "jpg", "level": 3}}, r"encode\.image\.level: Extra inputs are not permitted"),
    ],
)
def test_a_bad_encode_argument_is_refused_before_reading(tmp_path: Path, encode: Any, message: str) -> None:
    """An unknown format or a quality out of place is an ArgumentError naming ``encode.<field>``."""
    with pytest.raises(ArgumentError, match=message):
        pack([{"image": _png_bytes()}], str(tmp_path / "out"), encode=encode, progress=False)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"image_size": 0}, r"dataset\.image_size"),
        ({"image_size": [1, 2, 3]}, r"dataset\.image_size"),
        ({"image_mode": "CMYK"}, r"dataset\.image_mode"),
        ({"image_size": 8, "decode": False}, r"dataset\.image_size: applies to decoded images, but decode"),
        ({"image_mode": "L", "decode": ["npy"]}, r"dataset\.image_mode: applies to decoded images"),
    ],
)
def test_image_fields_of_the_shards_spec_are_validated(fields: dict[str, Any], message: str) -> None:
    """A bad size or mode, or one with images left undecoded, is named at its config path."""
    with pytest.raises(ConfigError, match=message):
        loaderfactory.validate({"dataset": {"kind": "shards", "urls": "a.tar", **fields}})


def test_without_pillow_images_fail_saying_how_to_install_and_decode_false_reads(
    tmp_path: Path, jpeg_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without Pillow an image field does not silently stay bytes: reading it says to install the
    ``images`` extra or pass ``decode=False``, which still reads the bytes."""
    dataset = JpegFolder(str(jpeg_root))
    pack(dataset, str(tmp_path), encode={"image": "jpg"}, progress=False)
    monkeypatch.setitem(sys.modules, "PIL", None)  # `from PIL import Image` raises ImportError
    with pytest.raises(ShardError, match=re.escape('needs Pillow: pip install "loaderfactory[images]"')):
        ShardsDataset(str(tmp_path))[0]
    assert _field(ShardsDataset(str(tmp_path), decode=False)[0], "image") == dataset.files[0].read_bytes()


def test_the_image_extensions_agree_across_layers() -> None:
    """The spec's image formats, the packer's and the reader's are the same extensions."""
    assert set(ImageFormat.__args__) == set(PIL_FORMATS) == IMAGES == set(IMAGE_EXTENSIONS)


def test_the_command_packs_jpeg_bytes_marked_by_pack_encode(tmp_path: Path, jpeg_root: Path) -> None:
    """``run.mode=pack pack.encode.image=jpg`` keeps the files' bytes; a format it does not know
    exits 2 naming ``pack.encode.image``."""
    dataset = ["~dataset", "+dataset._target_=image_data.JpegFolder", f"+dataset.root={jpeg_root}"]
    common = ["run.mode=pack", "run.progress=false", *dataset, f"hydra.run.dir={tmp_path / 'run'}"]
    result = run_command(SUPPORT, *common, f"pack.out={tmp_path / 'out'}", "pack.encode.image=jpg")
    assert result.returncode == 0, result.stderr
    files = JpegFolder(str(jpeg_root)).files
    members = _members(tmp_path / "out")
    assert [members[f"{i:06d}.image.jpg"] for i in range(COUNT)] == [path.read_bytes() for path in files]

    result = run_command(SUPPORT, *common, f"pack.out={tmp_path / 'bad'}", "pack.encode.image=gif")
    assert result.returncode == 2, result.stderr
    assert re.search(
        r"pack\.encode\.image\.format: .*'jpg', 'jpeg', 'png' or 'webp', got 'gif'", result.stderr
    ), result.stderr


def test_the_images_guide_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/shards/images.md's example packs a class-folder tree of JPEGs and reads one at 224×224."""
    guide = (ROOT / "docs" / "shards" / "images.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", guide, re.DOTALL)
    write_jpeg_folder(tmp_path / "photos", 6)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/shards/images.md", "exec"), namespace)
    assert namespace["image"].shape == (3, 224, 224) and namespace["image"].dtype == torch.uint8
    assert len(namespace["shards"]) == 6


def test_a_camera_jpeg_opened_as_mpo_keeps_its_file_as_jpg(tmp_path: Path) -> None:
    """Pillow opens many cameras' JPEGs as MPO (more images after the first): stored as the file,
    under ``.jpg``, it reads back as the first image."""
    first, second = Image.fromarray(photo(5, 16, 24)), Image.fromarray(photo(6, 16, 24))
    path = tmp_path / "camera.jpg"
    first.save(path, format="MPO", save_all=True, append_images=[second], quality=90)
    with Image.open(path) as opened:
        assert opened.format == "MPO"
        pack([{"image": opened}], str(tmp_path / "out"), progress=False)
        want = _pixels(opened)
    assert _members(tmp_path / "out") == {"000000.image.jpg": path.read_bytes()}
    assert torch.equal(_field(ShardsDataset(str(tmp_path / "out"))[0], "image"), want)
