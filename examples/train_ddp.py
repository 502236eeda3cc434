"""Data-parallel training of a tiny model, one process per rank, the loader built from our YAML.

    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --epochs 2

Each rank builds the same config (``loader=sharded_ddp`` or ``--loader torch_workers``,
``distributed: auto``): the loader
reads its rank and world size from the process group once, and loads a disjoint part of one
seeded per-epoch shuffle, every rank the same number of steps, so the gradient all-reduce of
every step has a partner on every rank. ``--record DIR`` writes the indices each rank saw.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import loaderfactory


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--length", type=int, default=512, help="items in the synthetic dataset")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="worker processes per rank")
    parser.add_argument("--loader", default="sharded_ddp", help="loader preset: sharded_ddp or torch_workers")
    parser.add_argument("--record", type=Path, default=None, help="write rank<r>.json with the indices seen")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. loader.balance=drop")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    cfg = loaderfactory.compose(
        [
            f"loader={args.loader}",
            "loader.shuffle=true",
            "~prefetch",
            "seed=0",
            f"dataset.length={args.length}",
            f"loader.batch_size={args.batch_size}",
            f"loader.num_workers={args.workers}",
            *args.overrides,
        ]
    )
    model = DistributedDataParallel(nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[list[int]] = []
    steps: list[int] = []
    with loaderfactory.build_loader(cfg) as loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)  # optional: each pass advances the epoch by itself
            indices: list[int] = []
            for batch in loader:
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(batch["image"]), batch["label"])
                loss.backward()  # DDP all-reduces the gradients here: every rank must take this step
                optimizer.step()
                # One explicit all-reduce per step as well: the summed loss every rank logs.
                total = loss.detach().clone()
                dist.all_reduce(total)
                indices += [int(i) for i in batch["index"]]
            seen.append(indices)
            steps.append(len(indices))
            if rank == 0:
                print(
                    f"epoch {epoch}: {len(loader)} steps per rank, mean loss {total.item() / world_size:.4f}"
                )
    if args.record is not None:
        args.record.mkdir(parents=True, exist_ok=True)
        record = {"rank": rank, "world_size": world_size, "epochs": seen}
        (args.record / f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
