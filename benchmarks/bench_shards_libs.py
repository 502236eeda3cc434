"""How bench_shards.py reads with each library: a loader over its own format, as its docs show.

Each ``open_<library>(run)`` returns a :class:`Reader`: ``make(state)`` builds a fresh loader
(resumed from ``state`` when given, by the library's own resume) and ``save(loader)`` returns its
state. Every batch holds ``batch`` items decoded to a uint8 tensor and an int label (collated to
tensors). ``run`` is the dict bench_shards.py passes: ``folder`` (local) or ``url`` + ``s3`` (remote),
``workers``, ``batch``, ``cache`` (a fresh local folder for remote runs), ``order``.

``order: shuffled`` reads with each library's own default shuffle, as its docs show for training:

- ``ours``: ``shuffle: true`` with the defaults (``shuffle_window: auto`` from ``shuffle_memory``
  4 GiB: every shard of these sets in one window);
- ``wds``: ``WebDataset(urls, shardshuffle=100).shuffle(1000)`` (``shardshuffle=True`` is 100 shards,
  with a warning to give a number; 1000 samples is the buffer of its README's training examples);
- ``litdata``: ``StreamingDataset(shuffle=True)``;
- ``mosaic``: ``StreamingDataset(shuffle=True)`` (its default algorithm, py1e).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Reader:
    make: Callable[[Any], Any]
    save: Callable[[Any], Any] | None
    """None: the library has no resume."""
    batch_data: Callable[[Any], Any]
    """The batch's uint8 data tensor (one row per item)."""

    def batch_items(self, batch: Any) -> tuple[int, int]:
        """(items, data bytes) of a batch."""
        data = self.batch_data(batch)
        return int(data.shape[0]), int(data.numel())


def _tensor_data(batch: Any) -> Any:
    return batch[0] if isinstance(batch, (list, tuple)) else batch["data"]


def _shuffled(run: dict[str, Any]) -> bool:
    return run.get("order", "stored") == "shuffled"


def _s3_env(run: dict[str, Any]) -> None:
    """The standard AWS variables for libraries that read their endpoint from the environment."""
    s3 = run["s3"]
    os.environ.update(
        AWS_ENDPOINT_URL=s3["endpoint_url"],
        S3_ENDPOINT_URL=s3["endpoint_url"],
        AWS_ACCESS_KEY_ID=s3["key"],
        AWS_SECRET_ACCESS_KEY=s3["secret"],
        AWS_DEFAULT_REGION="us-east-1",
    )


def open_ours(run: dict[str, Any]) -> Reader:
    import loaderfactory
    import loaderfactory.builders.shards
    import loaderfactory.factory  # imported before the clock starts, as the peers are
    from loaderfactory.config import registry

    registry.load_plugins()  # the kinds' specs, built on their first use in a process: an import too

    dataset: dict[str, Any] = {"kind": "shards", "urls": run.get("url") or f"{run['folder']}/"}
    if "url" in run:
        import s3fs  # noqa: F401  # the storage library, imported up front as each peer imports its own

        dataset["storage_options"] = dict(run["s3"])
        dataset["cache"] = {"dir": run["cache"]}
        dataset["predownload"] = run["batch"] * 64
    loader = {"kind": "torch", "batch_size": run["batch"], "num_workers": run["workers"]}
    if _shuffled(run):
        loader["shuffle"] = True
    config = {"dataset": dataset, "loader": loader}

    def make(state: Any) -> Any:
        built = loaderfactory.build_loader(config)
        if state is not None:
            built.load_state_dict(state)
        return built

    def data(batch: Any) -> Any:
        return batch["data"] if "data" in batch else batch["data.npy"]  # a checkout before the round trip

    return Reader(make, lambda loader: loader.state_dict(), data)


def open_wds(run: dict[str, Any]) -> Reader:
    import webdataset as wds

    if "url" in run:  # webdataset reads S3 through a pipe: (its docs use `aws s3 cp`; boto3 does the same)
        _s3_env(run)
        bucket, _, prefix = run["url"][len("s3://") :].partition("/")
        names = run["shards"]
        script = (
            "import boto3,sys;boto3.client('s3').download_fileobj(sys.argv[1],sys.argv[2],sys.stdout.buffer)"
        )
        urls = [f'pipe:{sys.executable} -c "{script}" {bucket} {prefix}{name}' for name in names]
    else:
        urls = [os.path.join(run["folder"], name) for name in run["shards"]]

    def make(state: Any) -> Any:
        if _shuffled(run):
            samples = wds.WebDataset(urls, shardshuffle=100, empty_check=False).shuffle(1000)
        else:
            samples = wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        dataset = samples.decode().to_tuple("data.npy", "label.cls").map_tuple(torch.from_numpy, int)
        return torch.utils.data.DataLoader(dataset, batch_size=run["batch"], num_workers=run["workers"])

    return Reader(make, None, _tensor_data)


def open_litdata(run: dict[str, Any]) -> Reader:
    from litdata import StreamingDataLoader, StreamingDataset

    options: dict[str, Any] = {}
    if "url" in run:
        _s3_env(run)
        options = {"endpoint_url": run["s3"]["endpoint_url"]}
        # litdata fetches chunks with obstore, whose client options it fixes without allow_http, so
        # an http:// endpoint fails ("builder error"); the one setting added to them:
        from litdata.streaming import downloader

        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"  # type: ignore[index]

    def make(state: Any) -> Any:
        kwargs: dict[str, Any] = {"storage_options": options} if options else {}
        if "url" in run:
            kwargs["cache_dir"] = run["cache"]
        dataset = StreamingDataset(run.get("url") or run["folder"], shuffle=_shuffled(run), **kwargs)
        loader = StreamingDataLoader(dataset, batch_size=run["batch"], num_workers=run["workers"])
        if state is not None:
            loader.load_state_dict(state)
        return loader

    return Reader(make, lambda loader: loader.state_dict(), _tensor_data)


def open_mosaic(run: dict[str, Any]) -> Reader:
    from streaming import StreamingDataLoader, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    if "url" in run:
        _s3_env(run)
    made: list[Any] = []

    def make(state: Any) -> Any:
        for old in made:  # one live StreamingDataset per local folder
            del old
        made.clear()
        local = {"remote": run["url"], "local": run["cache"]} if "url" in run else {"local": run["folder"]}
        dataset = StreamingDataset(**local, batch_size=run["batch"], shuffle=_shuffled(run))
        loader = StreamingDataLoader(dataset, batch_size=run["batch"], num_workers=run["workers"])
        if state is not None:
            loader.load_state_dict(state)
        return loader

    return Reader(make, lambda loader: loader.state_dict(), _tensor_data)


OPENERS = {"ours": open_ours, "wds": open_wds, "litdata": open_litdata, "mosaic": open_mosaic}
