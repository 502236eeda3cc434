"""A ``ShardsDataset``'s per-sample transforms: applied to each sample after it is read (a batch's
runs read at once first), in the process that reads it, each sample with a generator of its own.

A transform that takes a generator (the registered ones, ``f(item, generator)``) draws from a
``torch.Generator`` seeded by ``(seed, epoch, index)``: a sample gets the same draw in every run of
the same seed, whichever worker reads it and however many there are, a resumed epoch draws what the
uninterrupted one would have, and each epoch draws anew. The epoch is the one being read:
``epoch_order(seed, epoch)`` (every shuffled epoch) and ``set_epoch(epoch)`` (``Loader.set_epoch``)
set it in the process running the sampler; in a DataLoader worker, the dataset sets it from the
epoch its batches announce (:mod:`~loaderfactory.components.epoch_announce`). An unshuffled epoch
nobody numbers draws as epoch 0. Plain ``f(item)`` callables draw from the global generators, which
the loaders seed per worker, as for the other dataset kinds.

Items are replaced in the list read, never edited: a :class:`~loaderfactory.components.data.stacked.
StackedItems` batch keeps its batch tensor for every field the transforms leave as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from loaderfactory.components.data.transforms import Compose, takes_generator

Transform = Callable[..., Any]
_MASK = 2**64 - 1


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The generator seed of sample ``index`` in ``epoch``: splitmix64 over the three, so that
    neighbouring samples and epochs get unrelated streams."""
    value = 0
    for part in (seed, epoch, index):
        value = (value ^ (part & _MASK)) * 0x9E3779B97F4A7C15 & _MASK
        value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
        value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
        value ^= value >> 31
    return value % 2**63


class SampleTransforms:
    """Apply ``transform`` to each sample a :class:`~loaderfactory.shards.ShardsDataset` reads.

    Costs a ``torch.Generator`` per sample.

    Args:
        transform: ``f(item, generator=None)`` or ``f(item)``; a list is applied in order.
        seed: seeds the draws; None: the seed of the shuffled order being read (the loader's, kept
            in its state), 0 before any.
    """

    def __init__(self, transform: Transform | Sequence[Transform], seed: int | None) -> None:
        self.transform = Compose(transform) if isinstance(transform, Sequence) else transform
        if not callable(self.transform):
            raise TypeError(f"transforms must be callable, got {transform!r}")
        self.seed = seed
        self.takes_generator = takes_generator(self.transform)
        self.order_seed, self.epoch = 0, 0

    def set_epoch(self, epoch: int, seed: int | None = None) -> None:
        """Draw as epoch ``epoch`` (of the order seeded by ``seed``; None: the order seed set last)
        from the next read on, in this process."""
        self.epoch = epoch
        if seed is not None:
            self.order_seed = seed

    def apply(self, samples: list[Any], indices: Sequence[int], length: int) -> list[Any]:
        """``samples`` (read for ``indices``) with each replaced by its transformed self."""
        epoch = self.epoch
        seed = self.seed if self.seed is not None else self.order_seed
        for place, (sample, index) in enumerate(zip(samples, indices, strict=True)):
            position = index + length if index < 0 else index
            samples[place] = self._one(sample, seed, epoch, position)
        return samples

    def _one(self, sample: Any, seed: int, epoch: int, position: int) -> Any:
        try:
            if not self.takes_generator:
                return self.transform(sample)
            generator = torch.Generator().manual_seed(sample_seed(seed, epoch, position))
            return self.transform(sample, generator)
        except Exception as err:
            err.add_note(f"in dataset.transforms, on {_named(sample, position)}")
            raise


def _named(sample: Any, position: int) -> str:
    """``sample 'k' of <url> (#i overall)``, as far as the sample tells."""
    if isinstance(sample, dict) and "__key__" in sample:
        return f"sample {sample['__key__']!r} of {sample.get('__url__', '?')} (#{position} overall)"
    return f"sample #{position}"
