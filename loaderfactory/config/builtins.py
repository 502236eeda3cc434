"""Every built-in kind, one line each: table, name, spec, builder.

Imported on the registry's first use; users add kinds with the same ``register`` call. Builders
are imported when a kind is first built, so validating a config (``run.mode=validate``, the
schema, ``--help``) never imports torch.
"""

from __future__ import annotations

from loaderfactory.config.registry import lazy, register
from loaderfactory.config.specs.collate import DefaultCollateSpec, DictCollateSpec, RingCollateSpec
from loaderfactory.config.specs.dataset import SyntheticDatasetSpec, TargetDatasetSpec, TensorFolderSpec
from loaderfactory.config.specs.loader import TorchLoaderSpec
from loaderfactory.config.specs.prefetch import ThreadBufferSpec
from loaderfactory.config.specs.queue import QueueDatasetSpec
from loaderfactory.config.specs.sharded import ShardedLoaderSpec
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


register("dataset", "synthetic", SyntheticDatasetSpec, builder("dataset", "build_synthetic"))
register("dataset", "tensor_folder", TensorFolderSpec, builder("dataset", "build_tensor_folder"))
register("dataset", "_target_", TargetDatasetSpec, builder("dataset", "build_target"))
register("queue", "ram", QueueDatasetSpec, builder("queue", "build_ram_queue"))
register("loader", "torch", TorchLoaderSpec, builder("loader", "build_torch_loader"))
register("loader", "sharded", ShardedLoaderSpec, builder("sharded", "build_sharded_loader"))
register("stream", "epochs", StreamWrapperSpec, builder("stream", "build_stream_wrapper"))
register("prefetch", "thread", ThreadBufferSpec, builder("prefetch", "build_thread_buffer"))
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
