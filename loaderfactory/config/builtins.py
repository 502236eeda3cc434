"""Every built-in kind, one line each: table, name, spec, builder.

Imported once by ``loaderfactory/__init__.py``; users add kinds with the same ``register`` call.
"""

from __future__ import annotations

from loaderfactory.builders.collate import build_default_collate, build_dict_collate, build_ring_collate
from loaderfactory.builders.dataset import build_synthetic, build_target, build_tensor_folder
from loaderfactory.builders.loader import build_torch_loader
from loaderfactory.builders.prefetch import build_thread_buffer
from loaderfactory.builders.queue import build_ram_queue
from loaderfactory.builders.sharded import build_sharded_loader
from loaderfactory.builders.stream import build_stream_wrapper
from loaderfactory.builders.transforms import (
    build_compose,
    build_gaussian_noise,
    build_normalize,
    build_rand_flip,
    build_rand_permute,
    build_random_crop,
    build_to_dtype,
)
from loaderfactory.config.registry import register
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

register("dataset", "synthetic", SyntheticDatasetSpec, build_synthetic)
register("dataset", "tensor_folder", TensorFolderSpec, build_tensor_folder)
register("dataset", "_target_", TargetDatasetSpec, build_target)
register("queue", "ram", QueueDatasetSpec, build_ram_queue)
register("loader", "torch", TorchLoaderSpec, build_torch_loader)
register("loader", "sharded", ShardedLoaderSpec, build_sharded_loader)
register("stream", "epochs", StreamWrapperSpec, build_stream_wrapper)
register("prefetch", "thread", ThreadBufferSpec, build_thread_buffer)
register("transform", "compose", ComposeSpec, build_compose)
register("transform", "rand_flip", RandFlipSpec, build_rand_flip)
register("transform", "rand_permute", RandPermuteSpec, build_rand_permute)
register("transform", "gaussian_noise", GaussianNoiseSpec, build_gaussian_noise)
register("transform", "normalize", NormalizeSpec, build_normalize)
register("transform", "random_crop", RandomCropSpec, build_random_crop)
register("transform", "to_dtype", ToDtypeSpec, build_to_dtype)
register("collate", "default", DefaultCollateSpec, build_default_collate)
register("collate", "dict", DictCollateSpec, build_dict_collate)
register("collate", "ring", RingCollateSpec, build_ring_collate)
