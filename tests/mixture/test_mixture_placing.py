"""A mixture's batches cut from whole spans (consecutive, strided) read what each position reads
alone: every source, pass and sample, across chunks, passes and a short last unit."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from loaderfactory.components.epoch_announce import EpochTag, TaggedBatch
from loaderfactory.mixture import timeline
from loaderfactory.mixture.dataset import MixtureDataset

SIZES = {"web": 300, "code": 170, "books": 45}


def dataset(stop: Any, unit: int = 1, block: int = 64, **more: Any) -> MixtureDataset:
    sources = {name: [(name, i) for i in range(size)] for name, size in SIZES.items()}
    weights = [(0, {"web": 5.0, "code": 3.0, "books": 2.0})]
    return MixtureDataset(sources, weights, stop, block=block, unit=unit, **more)


CASES: dict[str, dict[str, Any]] = {
    "one pass each": {"stop": "all_exhausted"},
    "many passes, 3 epochs of chunks": {"stop": 2_001},
    "a global batch per source, the last cut short": {"stop": 1_003, "unit": 16, "block": 8},
    "unshuffled sources": {"stop": 999, "shuffle": False},
}


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 256 positions, so an epoch crosses several."""
    monkeypatch.setattr(timeline, "CHUNK_POSITIONS", 256)


def alone(mixture: MixtureDataset, epoch: int) -> list[tuple[str, int]]:
    """Each position's item read one position at a time, from its own placement."""
    sources, _, indices = mixture.place(np.arange(len(mixture)), epoch)
    return [(mixture.names[s], i) for s, i in zip(sources.tolist(), indices.tolist(), strict=True)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("epoch", [0, 3])
def test_batches_read_what_each_position_reads(case: str, epoch: int) -> None:
    mixture = dataset(**CASES[case])
    mixture.set_epoch(epoch)
    want = alone(mixture, epoch)
    length = len(mixture)
    for batch in (7, 64, 100):
        runs = [list(range(a, min(a + batch, length))) for a in range(0, length, batch)]
        assert [item for run in runs for item in mixture.__getitems__(run)] == want
    tag = EpochTag(0, epoch, False)
    for world in (2, 3):  # a rank's part: every world-th position
        for rank in range(world):
            mine = range(rank, length, world)
            for a in range(0, len(mine), 50):
                part = mine[a : a + 50]
                got = mixture.__getitems__(TaggedBatch(list(part), tag, world))
                assert got == [want[p] for p in part]
    shuffled = np.random.default_rng(epoch).permutation(length).tolist()
    assert mixture.__getitems__(shuffled) == [want[p] for p in shuffled]


@pytest.mark.parametrize("case", CASES)
def test_each_pass_over_a_source_reads_every_sample_once(case: str) -> None:
    mixture = dataset(**CASES[case])
    items = alone(mixture, 1)
    drawn = mixture.draws(1)
    for s, (name, size) in enumerate(SIZES.items()):
        got = [i for source, i in items if source == name]
        assert len(got) == drawn[s]
        whole, rest = divmod(len(got), size)
        for number in range(whole):
            assert sorted(got[number * size : (number + 1) * size]) == list(range(size))
        assert max(Counter(got[whole * size :]).values(), default=1) == 1 and len(got[whole * size :]) == rest
