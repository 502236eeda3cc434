"""Every built-in kind, one line each: table, name, spec, builder.

Imported once by ``loaderfactory/__init__.py``; users add kinds with the same ``register`` call.
"""

from __future__ import annotations

from loaderfactory.builders.collate import build_default_collate
from loaderfactory.builders.dataset import build_synthetic, build_target, build_tensor_folder
from loaderfactory.builders.loader import build_torch_loader
from loaderfactory.builders.prefetch import build_thread_buffer
from loaderfactory.builders.sharded import build_sharded_loader
from loaderfactory.builders.stream import build_stream_wrapper
from loaderfactory.registry import register
from loaderfactory.specs.collate import DefaultCollateSpec
from loaderfactory.specs.dataset import SyntheticDatasetSpec, TargetDatasetSpec, TensorFolderSpec
from loaderfactory.specs.loader import TorchLoaderSpec
from loaderfactory.specs.prefetch import ThreadBufferSpec
from loaderfactory.specs.sharded import ShardedLoaderSpec
from loaderfactory.specs.stream import StreamWrapperSpec

register("dataset", "synthetic", SyntheticDatasetSpec, build_synthetic)
register("dataset", "tensor_folder", TensorFolderSpec, build_tensor_folder)
register("dataset", "_target_", TargetDatasetSpec, build_target)
register("loader", "torch", TorchLoaderSpec, build_torch_loader)
register("stream", "epochs", StreamWrapperSpec, build_stream_wrapper)
register("loader", "sharded", ShardedLoaderSpec, build_sharded_loader)
register("prefetch", "thread", ThreadBufferSpec, build_thread_buffer)
register("collate", "default", DefaultCollateSpec, build_default_collate)
