"""The ``tuple`` collate kind (dict items → ``(x, y)`` batches) and the synthetic dataset's ``index``."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch.utils.data import default_collate

import loaderfactory
from loaderfactory import ConfigError
from loaderfactory.components.data.datasets import SyntheticDataset
from loaderfactory.components.data.tuple_collate import TupleCollate
from loaderfactory.config.validation import validate_plain


def pipeline(keys: list[str], index: bool = True, length: int = 10) -> dict[str, Any]:
    return {
        "dataset": {
            "kind": "synthetic",
            "length": length,
            "fields": {"image": {"shape": [2]}, "label": {"dtype": "int64"}},
            "index": index,
        },
        "loader": {"kind": "torch", "batch_size": 4, "collate": {"kind": "tuple", "keys": keys}},
    }


def test_a_tuple_batch_unpacks_in_key_order() -> None:
    """`x, y = batch` gives default_collate's values of the keys, in the order given."""
    with loaderfactory.build_loader(pipeline(["label", "image"])) as loader:
        dataset = loader["dataset"]
        for number, batch in enumerate(loader):
            y, x = batch
            assert type(batch) is tuple and len(batch) == 2
            expected = default_collate([dataset[i] for i in range(4 * number, min(4 * number + 4, 10))])
            assert torch.equal(x, expected["image"]) and torch.equal(y, expected["label"])


def test_a_tuple_batch_with_the_index_counts_every_id_once() -> None:
    """Over an epoch of shuffled tuple batches every item's index comes exactly once."""
    config = pipeline(["image", "index"], length=23)
    config["loader"]["shuffle"] = True
    with loaderfactory.build_loader(config) as loader:
        ids = [i for _, index in loader for i in index.tolist()]
    assert sorted(ids) == list(range(23))


def test_a_missing_key_names_it_and_the_keys_the_item_has() -> None:
    """An item without a key raises KeyError naming the key, the item's keys and which item."""
    items = [{"image": torch.zeros(2), "label": 1}, {"image": torch.zeros(2)}]
    with pytest.raises(
        KeyError,
        match=r"tuple collate keys \['label'\] are not in the item; it has \['image'\] \(item 1 of the 2",
    ):
        TupleCollate(["image", "label"])(items)
    missing = r"\['index'\] are not in the item; it has \['image', 'label'\]"
    dataset = SyntheticDataset(4, {"image": {"shape": [2]}, "label": {"dtype": "int64"}}, index=False)
    config = {
        "loader": {"kind": "torch", "batch_size": 2, "collate": {"kind": "tuple", "keys": ["image", "index"]}}
    }
    with (
        loaderfactory.build_loader(config, dataset=dataset) as loader,
        pytest.raises(KeyError, match=missing),
    ):
        next(iter(loader))


def test_tuple_collate_refuses_what_cannot_be_a_tuple() -> None:
    """No keys, repeated keys and non-dict items are refused, saying what to give."""
    with pytest.raises(ValueError, match="non-empty list of item keys"):
        TupleCollate([])
    with pytest.raises(ValueError, match="must not repeat"):
        TupleCollate(["x", "x"])
    with pytest.raises(TypeError, match="needs dict items, got tuple"):
        TupleCollate(["x"])([(1, 2)])


def test_the_tuple_spec_names_its_problems() -> None:
    """`keys` is required, non-empty and without repeats, each reported at loader.collate.keys."""
    for keys, match in (
        ([], "list should have at least 1 item"),
        (["a", "b", "a"], r"must not repeat a key, got \['a'\]"),
    ):
        with pytest.raises(ConfigError, match=rf"loader\.collate\.keys: {match}"):
            validate_plain(pipeline(keys))
    config = pipeline(["image"])
    del config["loader"]["collate"]["keys"]
    with pytest.raises(ConfigError, match=r"loader\.collate\.keys: required, but missing"):
        validate_plain(config)


def test_synthetic_items_carry_their_index_unless_told_not_to() -> None:
    """`index: true` (the default) adds the index key; `false` leaves only the fields."""
    assert set(SyntheticDataset(3, {"x": {"shape": [1]}})[2]) == {"x", "index"}
    assert SyntheticDataset(3, {"x": {"shape": [1]}})[2]["index"] == 2
    assert set(SyntheticDataset(3, {"x": {"shape": [1]}}, index=False)[2]) == {"x"}
    plain = validate_plain({"dataset": {"kind": "synthetic"}}).dataset
    assert plain is not None and plain.index is True


def test_a_field_called_index_needs_index_false() -> None:
    """A field named `index` would be replaced by the item's index: refused unless `index: false`."""
    config = {"dataset": {"kind": "synthetic", "fields": {"index": {"dtype": "int64"}}}}
    with pytest.raises(ConfigError, match=r"dataset\.fields\.index: is also the key of the item's index"):
        validate_plain(config)
    config["dataset"]["index"] = False
    validate_plain(config)
    with pytest.raises(ValueError, match="fields has a key 'index'"):
        SyntheticDataset(3, {"index": {"dtype": "int64"}})


def test_collate_keys_the_synthetic_items_lack_are_refused_before_building() -> None:
    """A tuple's (or dict's) key the dataset's items do not have is refused at validation, with a guess."""
    message = "loader.collate.keys: ['lable'] are not keys of the items; dataset.fields (with dataset.index) "
    with pytest.raises(
        ConfigError, match=re.escape(message) + r"gives \['image', 'label', 'index'\]. Did you mean 'label'"
    ):
        validate_plain(pipeline(["image", "lable"]))
    config = pipeline(["image", "index"], index=False)
    config["loader"]["collate"]["kind"] = "dict"
    with pytest.raises(ConfigError, match=r"\['index'\] are not keys of the items"):
        validate_plain(config)
