"""The seed a component uses when it is given none: one that every data-parallel rank agrees on.

In order of preference:

1. ``PL_GLOBAL_SEED``, which Lightning's ``seed_everything(s)`` sets: the run is reproducible and
   every rank that seeded alike agrees;
2. under an initialised ``torch.distributed`` process group with more than one rank, rank 0 draws
   a seed and broadcasts it (a collective: every rank must build its loader);
3. in torchrun's environment (``WORLD_SIZE`` > 1) without a process group, the fixed seed 0;
4. alone, a draw from torch's global generator, so ``torch.manual_seed(s)`` makes it reproducible.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

FIXED_SEED = 0
"""The seed shared by ranks that can neither read a global seed nor talk to each other."""


def agreed_seed(world_size: int = 1) -> int:
    """A seed for a component given none, the same on every rank of ``world_size`` (see the module)."""
    global_seed = os.environ.get("PL_GLOBAL_SEED")
    if global_seed is not None:
        try:
            return int(global_seed)
        except ValueError:
            raise ValueError(
                f"PL_GLOBAL_SEED={global_seed!r} is not an integer; unset it or call seed_everything(int)"
            ) from None
    if world_size > 1 and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        drawn = [_draw() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(drawn, src=0)
        return int(drawn[0])  # type: ignore[arg-type]  # rank 0 filled it
    if world_size > 1 or _launched_world_size() > 1:
        return FIXED_SEED
    return _draw()


def _launched_world_size() -> int:
    """torchrun's ``WORLD_SIZE``, 1 when unset or unreadable."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def _draw() -> int:
    return int(torch.randint(0, 2**62, ()).item())
