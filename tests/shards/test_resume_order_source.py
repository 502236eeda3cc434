"""A state records the order its position counts in (``order``): a state saved mid-epoch in one order
is refused by a loader that reads in another (a ``Subset`` of shards before and after its order was
forwarded, a wrapper given ``ForwardEpochOrder`` between save and resume), and resumes exactly in
the same one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shards_data import write_tar_shards
from test_shards_wrapped_order import Augmented, ForwardedAugmented
from torch.utils.data import Subset

from loaderfactory import build_loader
from loaderfactory.errors import ResumeError
from loaderfactory.shards import ShardsDataset

COUNTS = [20] * 6
TOTAL = sum(COUNTS)
INDICES = list(range(0, TOTAL, 3))  # what random_split might keep
SEED = 7
TAKEN = 3  # batches read before the state is saved
KINDS = ["torch", "sharded"]
HIDING = "ignore:shuffle. Augmented wraps a ShardsDataset:UserWarning"  # the plain wrapper's warning


@pytest.fixture
def urls(tmp_path: Path) -> list[str]:
    return write_tar_shards(tmp_path, COUNTS)


def _subset(urls: list[str]) -> Subset[Any]:
    return Subset(_shards(urls), INDICES)


def _shards(urls: list[str]) -> ShardsDataset:
    """The shards read through 2 open shards, a window of one (a uniform order then reopens shards)."""
    return ShardsDataset(urls, progress=False, open_shards=2, shuffle_window=1)


def _config(kind: str) -> dict[str, Any]:
    return {"loader": {"kind": kind, "batch_size": 4, "shuffle": True}, "seed": SEED}


def _ids(batch: Any) -> list[int]:
    return [int(i) for i in batch["cls"]]


def _save(kind: str, dataset: Any, batches: int = TAKEN) -> tuple[list[int], dict[str, Any]]:
    """The ids of the first ``batches`` batches of epoch 0 and the state saved after them."""
    with build_loader(_config(kind), dataset=dataset) as run:
        it, ids = iter(run), []
        for _ in range(batches):
            ids += _ids(next(it))
        return ids, json.loads(json.dumps(run.state_dict()))


def _resume(kind: str, dataset: Any, state: dict[str, Any]) -> list[int]:
    """The ids the rest of the saved epoch brings."""
    with build_loader(_config(kind), dataset=dataset) as run:
        run.load_state_dict(state)
        return [i for batch in run for i in _ids(batch)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_subset_resumes_exactly_in_its_forwarded_order(kind: str, urls: list[str]) -> None:
    """Saved and resumed in the same (forwarded) order: the rest of the epoch, nothing lost or twice."""
    first, state = _save(kind, _subset(urls))
    assert state["slots"]["loader"]["state"]["order"] == "forwarded"
    rest = _resume(kind, _subset(urls), state)
    with build_loader(_config(kind), dataset=_subset(urls)) as run:
        whole = [i for batch in run for i in _ids(batch)]
    assert first + rest == whole
    assert sorted(first + rest) == INDICES


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_without_the_order_of_a_subset_is_refused(kind: str, urls: list[str]) -> None:
    """A state saved before a Subset's order was forwarded counted in a uniform order: resuming it
    in the window order would repeat some ids and skip others, so it is refused, naming both."""
    _, state = _save(kind, _subset(urls))
    state["slots"]["loader"]["state"].pop("order", None)  # the format of the code before
    with pytest.raises(ResumeError, match=r"'uniform'.*without 'order'.*'forwarded'.*end of an epoch"):
        _resume(kind, _subset(urls), state)


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_without_the_order_resumes_where_the_order_is_the_same(kind: str, urls: list[str]) -> None:
    """A ShardsDataset given itself always used its own order: an old state of it resumes exactly."""
    shards = _shards(urls)
    first, state = _save(kind, shards)
    state["slots"]["loader"]["state"].pop("order", None)
    rest = _resume(kind, _shards(urls), state)
    assert sorted(first + rest) == list(range(TOTAL))


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_without_the_order_at_an_epoch_end_resumes(kind: str, urls: list[str]) -> None:
    """Between epochs nothing of an epoch was counted: any order goes on exactly."""
    with build_loader(_config(kind), dataset=_subset(urls)) as run:
        assert sorted(i for batch in run for i in _ids(batch)) == INDICES
        state = json.loads(json.dumps(run.state_dict()))
    state["slots"]["loader"]["state"].pop("order", None)
    assert sorted(_resume(kind, _subset(urls), state)) == INDICES


@pytest.mark.filterwarnings(HIDING)
@pytest.mark.parametrize("kind", KINDS)
def test_a_wrapper_given_forward_epoch_order_between_save_and_resume_is_refused(
    kind: str, urls: list[str]
) -> None:
    """Saved with a wrapper that hid the order (uniform), resumed with it forwarding: refused; and the
    other way round."""
    _, state = _save(kind, Augmented(_shards(urls)))
    assert state["slots"]["loader"]["state"]["order"] == "uniform"
    with pytest.raises(ResumeError, match=r"order 'uniform'.*reads in order 'dataset'"):
        _resume(
            kind,
            ForwardedAugmented(_shards(urls)),
            state,
        )
    _, state = _save(kind, ForwardedAugmented(_shards(urls)))
    with pytest.raises(ResumeError, match=r"order 'dataset'.*reads in order 'uniform'"):
        _resume(kind, Augmented(_shards(urls)), state)


@pytest.mark.parametrize("kind", KINDS)
def test_the_error_is_reported_at_the_loader_slot(kind: str, urls: list[str]) -> None:
    """The message names the loader kind and what to do."""
    _, state = _save(kind, _subset(urls))
    state["slots"]["loader"]["state"]["order"] = "uniform"
    with pytest.raises(ResumeError, match=rf"loader \({kind}\).*repeat some items and skip others"):
        _resume(kind, _subset(urls), state)
