"""``ResumableSampler`` tags what it yields with the epoch: a plain list (or int) to every reader, which
announces the epoch in the process that unpickles it (a DataLoader worker)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence

import pytest

from loaderfactory.components import epoch_announce
from loaderfactory.components.epoch_announce import EpochTag, TaggedBatch, TaggedIndex, announced
from loaderfactory.components.order import RankOrder
from loaderfactory.components.samplers import ResumableSampler


class Ordered:
    """A dataset offering its own order (reversed), as a ``ShardsDataset`` does."""

    def __len__(self) -> int:
        return 10

    def epoch_order(self, seed: int, epoch: int) -> Sequence[int]:
        return list(reversed(range(10)))


@pytest.fixture(autouse=True)
def no_announcement(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(epoch_announce, "_announced", None)
    yield


def _sampler(batch_size: int | None, shuffle: bool, dataset: object = None) -> ResumableSampler:
    sampler = ResumableSampler(RankOrder(10, 5, shuffle, dataset=dataset), batch_size, drop_last=False)
    sampler.epoch = 3
    return sampler


def test_a_tagged_batch_is_the_plain_list_and_announces_its_epoch_when_unpickled() -> None:
    batches = list(_sampler(4, shuffle=True, dataset=Ordered()))
    assert batches == [[9, 8, 7, 6], [5, 4, 3, 2], [1, 0]]
    assert all(isinstance(batch, list) for batch in batches)
    assert announced() is None  # yielding announces nothing: only a process that unpickles does
    copy = pickle.loads(pickle.dumps(batches[0]))
    assert type(copy) is list and copy == [9, 8, 7, 6]
    assert announced() == EpochTag(5, 3, True)


def test_a_tagged_index_is_an_int_and_announces_its_epoch_when_unpickled() -> None:
    indices = list(_sampler(None, shuffle=False))
    assert indices == list(range(10)) and all(isinstance(index, int) for index in indices)
    copy = pickle.loads(pickle.dumps(indices[4]))
    assert type(copy) is int and copy == 4
    assert announced() == EpochTag(5, 3, False)


def test_a_uniform_shuffle_is_not_tagged_as_the_datasets_own_order() -> None:
    """Without an ``epoch_order`` the shuffle is a uniform permutation: a dataset inside must not
    take the epoch for its own order."""
    batch = next(iter(_sampler(4, shuffle=True)))
    pickle.loads(pickle.dumps(batch))
    assert announced() == EpochTag(5, 3, False)


def test_a_tag_costs_a_few_bytes_a_batch() -> None:
    indices = list(range(1000, 1064))
    plain, tagged = pickle.dumps(indices), pickle.dumps(TaggedBatch(indices, EpochTag(5, 3, True)))
    assert len(tagged) - len(plain) < 100
    assert pickle.loads(pickle.dumps(TaggedIndex(7, EpochTag(1, 2, False)))) == 7


@pytest.mark.parametrize(("shuffle", "world_size", "step"), [(False, 1, 1), (False, 3, 3), (True, 1, None)])
def test_a_batch_cut_from_a_range_says_its_step_after_pickling(
    shuffle: bool, world_size: int, step: int | None
) -> None:
    """A worker's dataset may read a slice of the unshuffled order as a run (a mixture does)."""
    sampler = ResumableSampler(RankOrder(120, seed=5, shuffle=shuffle, world_size=world_size), 8, False)
    for batch in sampler:
        received = pickle.loads(pickle.dumps(batch))
        assert received == list(batch)
        assert getattr(received, "step", None) == step
        if step is not None:
            assert received == list(range(received[0], received[0] + step * len(received), step))
