"""Every built-in kind, one call each: table, name, spec, builder and, for a slot kind, its contract.

Imported on the registry's first use; users add kinds with the same ``register`` call. Builders
are imported when a kind is first built, so validating a config (``run.mode=validate``, the
schema, ``--help``) never imports torch. A contract is the overrides that put the kind into the
contract tests' small pipeline (``tests/test_contracts.py``, ``tests/test_dataset_contracts.py``).
A kind may keep its builder and its contract's files beside its component (:func:`kind_module`).
"""

from __future__ import annotations

from loaderfactory.config.registry import CONTRACT_LENGTH, Contract, lazy, register
from loaderfactory.config.specs.collate import (
    DefaultCollateSpec,
    DictCollateSpec,
    RingCollateSpec,
    TupleCollateSpec,
)
from loaderfactory.config.specs.dataset import SyntheticDatasetSpec, TargetDatasetSpec, TensorFolderSpec
from loaderfactory.config.specs.loader import TorchLoaderSpec
from loaderfactory.config.specs.mixture import MixtureDatasetSpec
from loaderfactory.config.specs.prefetch import ThreadBufferSpec
from loaderfactory.config.specs.queue import QueueDatasetSpec
from loaderfactory.config.specs.sharded import ShardedLoaderSpec
from loaderfactory.config.specs.shards import ShardsDatasetSpec
from loaderfactory.config.specs.stream import StreamWrapperSpec
from loaderfactory.config.specs.transforms import (
    ComposeSpec,
    GaussianNoiseSpec,
    NormalizeSpec,
    RandFlipSpec,
    RandomCropSpec,
    RandPermuteSpec,
    ToDtypeSpec,
)


def builder(module: str, name: str) -> lazy:
    """``loaderfactory.builders.<module>.<name>``, imported when first called."""
    return lazy(f"loaderfactory.builders.{module}", name)


def example(name: str) -> lazy:
    """``loaderfactory.testing.contract_data.<name>``: a contract's files, imported when first called."""
    return lazy("loaderfactory.testing.contract_data", name)


def kind_module(module: str, name: str) -> lazy:
    """``loaderfactory.components.<module>.<name>``: a builder (``build``) or a contract's files
    (``contract_example``) kept in the kind's own module beside its component, imported when first called."""
    return lazy(f"loaderfactory.components.{module}", name)


# Contracts: the overrides that put each slot kind into the contract tests' small pipeline.
synthetic = ["dataset=synthetic", f"dataset.length={CONTRACT_LENGTH}", "dataset.fields.image.shape=[2]"]
folder = [
    Contract(example("tensor_folder_example")),
    Contract(example("tensor_folder_npy_example"), name="npy"),
]
shards = [
    Contract(example("shards_tar_example"), name="tar"),
    Contract(example("shards_parquet_example"), name="parquet"),
]
mixture = Contract(example("mixture_example"))
ram = Contract(
    ["queue=ram", "queue.epoch_size=6", "queue.batch_size=4", "queue.capacity=8"], exact_resume=False
)
torch_loader = Contract(
    ["loader=torch", "loader.batch_size=4", "loader.shuffle=true"], with_workers=["loader.num_workers=2"]
)
sharded = Contract(
    ["loader=sharded", "loader.batch_size=4", "loader.shuffle=true", "loader.last_batch=rollover"],
    with_workers=["loader.num_workers=2"],
)
epochs = Contract(
    ["stream=epochs", "loader.batch_size=4", "stream.epoch_size=7", "stream.buffer_size=2"],
    break_finishes_epoch=True,  # a stream's epochs are a count of batches, not passes over the data
)
thread = ["prefetch=thread", "loader.batch_size=4", "prefetch.buffer_size=2", "prefetch.repeats=2"]

register(
    "dataset", "synthetic", SyntheticDatasetSpec, builder("dataset", "build_synthetic"), contract=synthetic
)
register(
    "dataset", "tensor_folder", TensorFolderSpec, builder("dataset", "build_tensor_folder"), contract=folder
)
register("dataset", "shards", ShardsDatasetSpec, builder("shards", "build_shards"), contract=shards)
register("dataset", "mixture", MixtureDatasetSpec, builder("mixture", "build_mixture"), contract=mixture)
register("dataset", "_target_", TargetDatasetSpec, builder("dataset", "build_target"))
register("queue", "ram", QueueDatasetSpec, builder("queue", "build_ram_queue"), contract=ram)
register("loader", "torch", TorchLoaderSpec, builder("loader", "build_torch_loader"), contract=torch_loader)
register("loader", "sharded", ShardedLoaderSpec, builder("sharded", "build_sharded_loader"), contract=sharded)
register("stream", "epochs", StreamWrapperSpec, builder("stream", "build_stream_wrapper"), contract=epochs)
register("prefetch", "thread", ThreadBufferSpec, builder("prefetch", "build_thread_buffer"), contract=thread)
register("transform", "compose", ComposeSpec, builder("transforms", "build_compose"))
register("transform", "rand_flip", RandFlipSpec, builder("transforms", "build_rand_flip"))
register("transform", "rand_permute", RandPermuteSpec, builder("transforms", "build_rand_permute"))
register("transform", "gaussian_noise", GaussianNoiseSpec, builder("transforms", "build_gaussian_noise"))
register("transform", "normalize", NormalizeSpec, builder("transforms", "build_normalize"))
register("transform", "random_crop", RandomCropSpec, builder("transforms", "build_random_crop"))
register("transform", "to_dtype", ToDtypeSpec, builder("transforms", "build_to_dtype"))
register("collate", "default", DefaultCollateSpec, builder("collate", "build_default_collate"))
register("collate", "dict", DictCollateSpec, builder("collate", "build_dict_collate"))
register("collate", "ring", RingCollateSpec, builder("collate", "build_ring_collate"))
register("collate", "tuple", TupleCollateSpec, builder("collate", "build_tuple_collate"))
