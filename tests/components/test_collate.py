"""Collate kinds: ``dict`` (key filter, stacking, conversion, unstackable keys) and ``default``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from shards_data import id_samples, tar_bytes

import loaderfactory
from loaderfactory.builders.helpers import build_helper
from loaderfactory.components.data.collate import DictCollate, MissingFieldError
from loaderfactory.config.specs.base import Spec
from loaderfactory.config.specs.refs import CollateRef


class Holder(Spec):
    collate: CollateRef


def build(data: dict[str, Any]) -> Any:
    return build_helper("collate", Holder.model_validate({"collate": data}).collate)


def items() -> list[dict[str, Any]]:
    return [
        {
            "vol": torch.full((2, 2), float(i)),
            "arr": np.ones(3) * i,
            "n": i,
            "x": 0.5 * i,
            "name": f"s{i}",
            "flag": True,
        }
        for i in range(3)
    ]


def test_dict_collate_stacks_and_converts() -> None:
    """Tensors stack; numpy arrays and Python numbers become stacked tensors; strings and bools stay lists."""
    batch = DictCollate()(items())
    assert batch["vol"].shape == (3, 2, 2)
    assert isinstance(batch["arr"], torch.Tensor) and batch["arr"].shape == (3, 3)
    assert batch["n"].tolist() == [0, 1, 2] and batch["x"].dtype == torch.get_default_dtype()
    assert batch["name"] == ["s0", "s1", "s2"] and batch["flag"] == [True, True, True]


def test_dict_collate_conversions_can_be_turned_off() -> None:
    """With conversions off, arrays and numbers are kept as lists; without stacking tensors are too."""
    batch = DictCollate(convert_numpy=False, convert_numbers=False, stack_tensors=False)(items())
    assert isinstance(batch["arr"], list) and batch["n"] == [0, 1, 2]
    assert isinstance(batch["vol"], list) and len(batch["vol"]) == 3


def test_key_filter_list_and_callable() -> None:
    """A list keeps exactly those keys in order; a predicate keeps the keys it accepts."""
    assert list(DictCollate(keys=["x", "vol"])(items())) == ["x", "vol"]
    assert list(DictCollate(keys=lambda k: k.startswith("v"))(items())) == ["vol"]


def test_key_filter_naming_a_missing_key_lists_the_item_keys() -> None:
    """A filtered key that the items lack is a KeyError naming what they have."""
    with pytest.raises(
        KeyError, match=r"collate keys \['tf_tex'\] are not in the item; it has \['arr', 'flag'"
    ):
        DictCollate(keys=["vol", "tf_tex"])(items())


def test_unstackable_key_warns_and_becomes_a_list() -> None:
    """Tensors of different shapes under one key become a list, with a warning naming key and shapes."""
    data = [{"vol": torch.zeros(2, 3)}, {"vol": torch.zeros(4, 3)}]
    with pytest.warns(
        RuntimeWarning, match=r"cannot stack key 'vol': its tensors have shapes \[\(2, 3\), \(4, 3\)\]"
    ):
        batch = DictCollate()(data)
    assert isinstance(batch["vol"], list)


def test_unstackable_key_errors_when_configured() -> None:
    """``on_unstackable='error'`` raises a ValueError naming the key and shapes."""
    data = [{"vol": torch.zeros(2)}, {"vol": torch.zeros(3)}]
    with pytest.raises(
        ValueError, match=r"cannot stack key 'vol': its tensors have shapes \[\(2,\), \(3,\)\]"
    ):
        DictCollate(on_unstackable="error")(data)


def test_unstackable_key_silently_listed_when_configured() -> None:
    """``on_unstackable='list'`` lists without a warning (warnings are errors in this suite)."""
    data = [{"vol": torch.zeros(2)}, {"vol": torch.zeros(3)}]
    assert len(DictCollate(on_unstackable="list")(data)["vol"]) == 2


def test_dict_collate_refuses_non_dicts_and_empty_batches() -> None:
    """Non-dict items and an empty list are errors that say so."""
    with pytest.raises(TypeError, match="needs dict items, got list"):
        DictCollate()([[1, 2]])
    with pytest.raises(ValueError, match="empty list"):
        DictCollate()([])
    with pytest.raises(TypeError, match="got the string 'vol'"):
        DictCollate(keys="vol")


def test_dict_kind_from_config_with_seed_alias() -> None:
    """``{kind: dict, key_filter: [...]}`` (the seed's name) builds a DictCollate with those keys."""
    collate = build({"kind": "dict", "key_filter": ["vol"], "on_unstackable": "error"})
    assert isinstance(collate, DictCollate) and collate.keys == ["vol"]
    assert list(collate(items())) == ["vol"]


def test_dict_kind_refuses_unknown_policies() -> None:
    """An unknown on_unstackable value is refused at validation."""
    with pytest.raises(ValidationError, match="'warn', 'error' or 'list'"):
        Holder.model_validate({"collate": {"kind": "dict", "on_unstackable": "ignore"}})


def test_default_kind_is_torchs_default_collate() -> None:
    """``{kind: default}`` is torch's default_collate."""
    batch = build({"kind": "default"})([{"a": torch.zeros(2)}, {"a": torch.ones(2)}])
    assert batch["a"].shape == (2, 2)


def _folder_with_a_hole(folder: Path, without: int) -> str:
    """One shard of samples 0..7 in which sample ``without`` has no ``npy``; its URL."""
    folder.mkdir()
    samples = id_samples(0, 8)
    del samples[without]["npy"]
    (folder / "holes.tar").write_bytes(tar_bytes(samples))
    return str(folder / "holes.tar")


HOLES = {
    "a later item lacks it": (5, None, "npy"),
    "the first item lacks it": (4, None, "npy"),
    "tuple collate": (5, {"kind": "tuple", "keys": ["cls", "npy"]}, r"\['npy'\]"),
    "dict collate": (5, {"kind": "dict", "keys": ["cls", "npy"]}, r"\['npy'\]"),
    "ring collate": (5, {"kind": "ring", "ring_size": 8}, r"\['npy'\], taken from item 0"),
}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("hole", HOLES)
def test_a_sample_missing_a_field_is_named_by_the_collate(
    tmp_path: Path, hole: str, num_workers: int
) -> None:
    """Shards without ``dataset.keys``, a sample lacking the ``npy`` the others have: the collate
    raises a KeyError naming the sample's key and shard and the field, and what to do; the batch
    before it comes whole. Never a bare ``KeyError: 'npy'``, nor a batch silently without ``npy``
    (the first item lacking it)."""
    without, collate, field = HOLES[hole]
    url = _folder_with_a_hole(tmp_path / "data", without)
    loader = {"kind": "torch", "batch_size": 4, "num_workers": num_workers}
    if collate is not None:
        loader["collate"] = collate
    config = {"dataset": {"kind": "shards", "urls": url}, "loader": loader}
    ids: list[int] = []
    with pytest.raises(KeyError, match=field) as raised, loaderfactory.build_loader(config) as batches:
        for batch in batches:
            ids += (batch[0] if isinstance(batch, tuple) else batch["cls"]).tolist()
    assert ids == [0, 1, 2, 3]
    assert f"sample 'sample{without:06d}' of {url} (item {without - 4} of the 4 collated)" in str(
        raised.value
    )
    assert "dataset.keys" in str(raised.value)
    assert isinstance(raised.value, MissingFieldError)  # a KeyError, in the workers too


@pytest.mark.parametrize("lacking", [0, 2])
def test_the_default_collate_names_an_item_lacking_a_field_others_have(lacking: int) -> None:
    """Plain dict items (no ``__key__``): the item is named by its place in the batch, whether it is
    the first (torch would leave the field out of the batch) or a later one (a bare KeyError)."""
    batch = items()
    del batch[lacking]["arr"]
    with pytest.raises(
        MissingFieldError, match=rf"item {lacking} of the 3 collated has no 'arr', which item"
    ):
        build({"kind": "default"})(batch)
