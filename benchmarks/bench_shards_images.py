"""JPEG shards, decoded: items/s of one epoch for loaderfactory, webdataset and litdata, same images.

    PYTHONPATH=$PWD /work/benchvenv/bin/python benchmarks/bench_shards_images.py [--count 2000] [--repeats 3]

Needs the benchmark environment (benchmarks/requirements-bench.txt says how to make it). ``--count``
photo-like 256×256 RGB JPEGs (quality 90, tests/support/image_data.py's ``photo``) are written once to
``--data``, then packed by each library's own writer, keeping the JPEG bytes: loaderfactory's
``pack(..., encode={"image": "jpg"})``, webdataset's ``ShardWriter`` (``.jpg`` members) and litdata's
``optimize`` (``PIL.Image.open(file)``, which it stores as the file's bytes), 64 MB shards or chunks.

Each run, in a fresh interpreter with ``torch.set_num_threads(1)``, reads one epoch in stored order
in batches of ``--batch``, every image decoded to a uint8 3×256×256 tensor and stacked with its
int label: loaderfactory through Pillow, webdataset with its ``torchrgb8`` decoder (Pillow),
litdata with its own (torchvision's ``decode_jpeg``). ``ours@128`` reads the same shards with
``image_size: 128`` (Pillow's draft: libjpeg decodes at half scale), a smaller output, shown for what
``image_size`` saves. Items/s from building the loader to the last batch; ``--repeats`` rounds over
all rows, interleaved, each row's median reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

LIBRARIES = ("ours", "wds", "litdata", "ours@128")
SHARD_BYTES = 64 * 2**20
SIDE = 256


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "bench_shards_images"))
    parser.add_argument("--out", default="bench_shards_images.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args()


def write_jpegs(folder: Path, count: int) -> list[Path]:
    """``count`` photo-like JPEGs in 10 class folders (kept and reused)."""
    from image_data import photo
    from PIL import Image

    files = [folder / f"class_{i % 10}" / f"{i:05d}.jpg" for i in range(count)]
    for i, path in enumerate(files):
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(photo(i, SIDE, SIDE)).save(path, quality=90)
    return files


def _label(path: Path) -> int:
    return int(path.parent.name.split("_")[1])


class _Files:
    """Item ``i``: the bytes of file ``i`` and its class (what ``pack`` takes)."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": self.files[i].read_bytes(), "label": _label(self.files[i])}


def _litdata_item(path: str) -> dict[str, Any]:
    from PIL import Image

    return {"image": Image.open(path), "label": _label(Path(path))}


def write_shards(root: Path, files: list[Path]) -> dict[str, Path]:
    """Each library's shards of ``files``, written once by its own writer; folder by library."""
    folders = {name: root / name for name in ("ours", "wds", "litdata")}
    if not folders["ours"].exists():
        from loaderfactory.shards import pack

        pack(_Files(files), str(folders["ours"]), SHARD_BYTES, encode={"image": "jpg"}, progress=False)
    if not folders["wds"].exists():
        import webdataset as wds

        folders["wds"].mkdir(parents=True)
        pattern = str(folders["wds"] / "shard-%06d.tar")
        with wds.ShardWriter(pattern, maxsize=SHARD_BYTES, verbose=0) as sink:
            for i, path in enumerate(files):
                sink.write({"__key__": f"{i:06d}", "jpg": path.read_bytes(), "cls": _label(path)})
    if not folders["litdata"].exists():
        from litdata import optimize

        optimize(
            fn=_litdata_item,
            inputs=[str(path) for path in files],
            output_dir=str(folders["litdata"]),
            chunk_bytes=SHARD_BYTES,
            num_workers=1,
            reorder_files=False,
            verbose=False,
        )
    return folders


def _loader(run: dict[str, Any]) -> tuple[Any, str]:
    """The library's loader over its shards, and the batch's image key (or index)."""
    import torch

    folder, batch, workers = run["folder"], run["batch"], run["workers"]
    if run["library"].startswith("ours"):
        import loaderfactory

        dataset: dict[str, Any] = {"kind": "shards", "urls": f"{folder}/"}
        if run["library"] == "ours@128":
            dataset["image_size"] = 128
        loader = {"kind": "torch", "batch_size": batch, "num_workers": workers}
        return loaderfactory.build_loader({"dataset": dataset, "loader": loader}), "image"
    if run["library"] == "wds":
        import webdataset as wds

        urls = sorted(str(path) for path in Path(folder).glob("*.tar"))
        stream = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("torchrgb8")
        stream = stream.to_tuple("jpg", "cls")
        return torch.utils.data.DataLoader(stream, batch_size=batch, num_workers=workers), 0
    from litdata import StreamingDataLoader, StreamingDataset

    dataset_ = StreamingDataset(folder, shuffle=False)
    return StreamingDataLoader(dataset_, batch_size=batch, num_workers=workers), "image"


def _images(batch: Any, key: Any) -> Any:
    if isinstance(key, int):
        return batch[key]
    (name,) = [name for name in batch if name.split(".", 1)[0] == key]  # image or image.jpg
    return batch[name]


def child(run: dict[str, Any]) -> dict[str, Any]:
    """One epoch of ``run``, in this (fresh) process: items, seconds, the image shape seen."""
    import torch

    torch.set_num_threads(1)  # intra-op threads stall stacking on a busy 2-core machine
    started = time.perf_counter()
    loader, key = _loader(run)
    items, shapes = 0, set()
    try:
        for batch in loader:
            images = _images(batch, key)
            items += int(images.shape[0])
            shapes.add((str(images.dtype), tuple(images.shape[1:])))
    finally:
        close = getattr(loader, "close", None)
        if callable(close):
            close()
    return {"items": items, "seconds": time.perf_counter() - started, "shapes": sorted(shapes)}


def measure(run: dict[str, Any]) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", json.dumps(run)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"na": (done.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> None:
    args = _arguments()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    root = Path(args.data)
    files = write_jpegs(root / "jpegs", args.count)
    jpeg_bytes = sum(path.stat().st_size for path in files)
    folders = write_shards(root / f"shards-{args.count}", files)
    sizes = {
        name: sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        for name, folder in folders.items()
    }
    print(
        f"{args.count} JPEGs, {jpeg_bytes / 2**20:.1f} MiB; shards (MiB): "
        + ", ".join(f"{name} {size / 2**20:.1f}" for name, size in sizes.items()),
        flush=True,
    )
    runs = [
        {
            "library": library,
            "workers": int(workers),
            "batch": args.batch,
            "folder": str(folders[library.split("@")[0]]),
        }
        for workers in args.workers.split(",")
        for library in args.libraries.split(",")
    ]
    figures: dict[int, list[float]] = {number: [] for number in range(len(runs))}
    results: dict[int, list[dict[str, Any]]] = {number: [] for number in range(len(runs))}
    for round_ in range(args.repeats):
        for number, run in enumerate(runs):
            result = measure(run)
            results[number].append(result)
            if "items" in result:
                figures[number].append(result["items"] / result["seconds"])
            said = result.get("na") or f"{result['items'] / result['seconds']:.0f} items/s {result['shapes']}"
            print(f"[round {round_ + 1}] {run['library']} workers={run['workers']}: {said}", flush=True)
    print(
        f"\nitems/s, median of {args.repeats} interleaved rounds ({args.count} JPEGs {SIDE}×{SIDE}, "
        f"batch {args.batch}):"
    )
    print(f"{'library':<10} {'workers':>7} {'items/s':>9}  rounds")
    table = []
    for number, run in enumerate(runs):
        median = statistics.median(figures[number]) if figures[number] else None
        rounds = ", ".join(f"{f:.0f}" for f in figures[number]) or results[number][-1].get("na", "")
        shown = f"{median:.0f}" if median is not None else "n/a"
        print(f"{run['library']:<10} {run['workers']:>7} {shown:>9}  {rounds}")
        table.append({**run, "items_per_s": median, "rounds": figures[number], "results": results[number]})
    Path(args.out).write_text(json.dumps({"args": vars(args), "shard_bytes": sizes, "rows": table}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
