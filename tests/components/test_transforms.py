"""Transforms: each kind, shared randomness across keys, seeding, apply_on, p, specs and registry."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from pydantic import ValidationError

from loaderfactory.builders.helpers import build_helper
from loaderfactory.components.data.transforms import (
    Compose,
    GaussianNoise,
    Normalize,
    RandFlip,
    RandomCrop,
    RandPermute,
    ToDtype,
    call_transform,
)
from loaderfactory.config.registry import available
from loaderfactory.config.specs.base import Spec
from loaderfactory.config.specs.refs import TransformRef


class Holder(Spec):
    transform: TransformRef


def build(data: dict[str, Any]) -> Any:
    return build_helper("transform", Holder.model_validate({"transform": data}).transform)


def item() -> dict[str, Any]:
    vol = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(1, 2 * 3, 4, 5)[:, :3].contiguous()
    return {"vol": vol, "mask": vol.clone().to(torch.uint8), "label": 3, "name": "a"}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_every_transform_kind_is_registered() -> None:
    """The seven built-in kinds are in the transform table."""
    assert {
        "compose",
        "rand_flip",
        "rand_permute",
        "gaussian_noise",
        "normalize",
        "random_crop",
        "to_dtype",
    } <= set(available("transform"))


def test_rand_flip_p1_flips_every_dim_of_every_key_alike() -> None:
    """p=1 flips all three spatial dims, identically for the volume and its mask."""
    x = item()
    out = RandFlip(p=1.0)(x, gen())
    assert torch.equal(out["vol"], x["vol"].flip([-3, -2, -1]))
    assert torch.equal(out["mask"], x["mask"].flip([-3, -2, -1]))
    assert out["label"] == 3 and out["name"] == "a"


def test_rand_flip_p0_is_identity_and_p_half_varies() -> None:
    """p=0 never flips; p=0.5 flips some dims on some calls."""
    x = item()
    assert torch.equal(RandFlip(p=0.0)(x, gen())["vol"], x["vol"])
    g = gen(1)
    outcomes = {tuple(RandFlip(p=0.5)(x, g)["vol"].flatten()[:3].tolist()) for _ in range(20)}
    assert len(outcomes) > 1


def test_rand_permute_keeps_keys_aligned_and_is_seeded() -> None:
    """A permutation is shared by all keys and the same generator seed gives the same permutation."""
    x = {"vol": torch.randn(1, 4, 4, 4), "mask": torch.randn(1, 4, 4, 4)}
    x["mask"] = x["vol"].clone()
    a, b = RandPermute()(x, gen(3)), RandPermute()(x, gen(3))
    assert torch.equal(a["vol"], a["mask"]) and torch.equal(a["vol"], b["vol"])
    seen = {tuple(RandPermute()(x, gen(s))["vol"].flatten()[:6].tolist()) for s in range(30)}
    assert len(seen) > 1


def test_rand_permute_p0_is_identity() -> None:
    """p=0 never permutes."""
    x = {"vol": torch.randn(1, 2, 3, 4)}
    assert RandPermute(p=0.0)(x, gen())["vol"].shape == (1, 2, 3, 4)


def test_gaussian_noise_is_seeded_and_leaves_the_input_alone() -> None:
    """Noise from one seed is repeatable, has about the given std and never edits the input in place."""
    x = {"vol": torch.zeros(1, 32, 32, 32)}
    a = GaussianNoise(std=0.5)(x, gen(4))
    b = GaussianNoise(std=0.5)(x, gen(4))
    assert torch.equal(a["vol"], b["vol"]) and torch.count_nonzero(x["vol"]) == 0
    assert 0.45 < float(a["vol"].std()) < 0.55


def test_gaussian_noise_keeps_dtype_and_skips_integer_tensors_by_default() -> None:
    """float16 stays float16; integer tensors are left alone unless named, then refused."""
    x = {"vol": torch.zeros(8, dtype=torch.float16), "mask": torch.zeros(8, dtype=torch.uint8)}
    out = GaussianNoise(std=1.0)(x, gen())
    assert out["vol"].dtype == torch.float16 and torch.equal(out["mask"], x["mask"])
    with pytest.raises(TypeError, match=r"item\['mask'\] has dtype torch.uint8; noise needs a float tensor"):
        GaussianNoise(apply_on=["mask"])(x, gen())


def test_gaussian_noise_p0_is_identity() -> None:
    """p=0 adds nothing."""
    x = {"vol": torch.zeros(8)}
    assert torch.equal(GaussianNoise(std=1.0, p=0.0)(x, gen())["vol"], x["vol"])


def test_normalize_standardises_by_default() -> None:
    """With no mean/std the tensor is standardised to mean 0 and std 1."""
    out = Normalize()({"vol": torch.randn(1000) * 5 + 3})["vol"]
    assert abs(float(out.mean())) < 1e-4 and abs(float(out.std()) - 1) < 1e-3


def test_normalize_per_channel_and_mismatch() -> None:
    """Per-channel lists broadcast along channel_dim; a wrong channel count names the shape."""
    x = {"img": torch.stack([torch.full((2, 2), 10.0), torch.full((2, 2), 20.0)])}
    out = Normalize(mean=[10.0, 20.0], std=[1.0, 2.0])(x)["img"]
    assert torch.allclose(out, torch.zeros(2, 2, 2), atol=1e-6)
    with pytest.raises(
        ValueError, match=r"3 per-channel values but dim 0 of a tensor of shape \(2, 2, 2\) has 2"
    ):
        Normalize(mean=[1.0, 2.0, 3.0], std=1.0)(x)


def test_random_crop_shares_the_offset_across_keys() -> None:
    """Every key is cropped at the same place; the crop size is as asked."""
    vol = torch.randn(1, 8, 8, 8)
    out = RandomCrop([4, 4, 4])({"vol": vol, "mask": vol.clone(), "label": 1}, gen(2))
    assert out["vol"].shape == (1, 4, 4, 4) and torch.equal(out["vol"], out["mask"])


def test_random_crop_refuses_a_crop_larger_than_the_item() -> None:
    """A crop that does not fit names the shapes; keys of different sizes are refused too."""
    with pytest.raises(ValueError, match=r"cannot crop \[4, 4\] out of \{'vol': \(3, 8\)\}"):
        RandomCrop([4, 4])({"vol": torch.zeros(1, 3, 8)})
    with pytest.raises(ValueError, match="last 2 dims differ"):
        RandomCrop([2, 2])({"a": torch.zeros(4, 4), "b": torch.zeros(5, 5)})


def test_to_dtype_converts_named_keys() -> None:
    """to_dtype converts the keys it is told to and nothing else."""
    x = item()
    out = ToDtype("float16", apply_on=["vol"])(x)
    assert out["vol"].dtype == torch.float16 and out["mask"].dtype == torch.uint8


def test_apply_on_missing_key_names_the_available_keys() -> None:
    """A key named in apply_on that is not in the item is a KeyError listing the item's keys."""
    with pytest.raises(
        KeyError,
        match=r"apply_on keys \['seg'\] are not in the item; it has \['label', 'mask', 'name', 'vol'\]",
    ):
        RandFlip(apply_on=["seg"])(item())


def test_compose_apply_on_overrides_its_children() -> None:
    """Compose(apply_on=['vol']) makes every child touch only ``vol`` (the seed's behaviour)."""
    x = item()
    out = Compose([RandFlip(p=1.0), ToDtype("float64")], apply_on=["vol"])(x, gen())
    assert out["vol"].dtype == torch.float64 and torch.equal(out["mask"], x["mask"])


def test_compose_calls_plain_callables_without_a_generator() -> None:
    """Plain ``f(item)`` functions mix with seeded transforms in a Compose."""
    out = Compose([lambda d: {**d, "seen": True}, RandFlip(p=1.0)])(item(), gen())
    assert out["seen"] is True


def test_compose_p0_is_identity() -> None:
    """p=0 skips the whole chain."""
    x = item()
    assert torch.equal(Compose([RandFlip(p=1.0)], p=0.0)(x, gen())["vol"], x["vol"])


def test_transforms_work_on_batches() -> None:
    """Dims counted from the end make a sample transform work on a batch, one draw for the whole batch."""
    batch = {"vol": torch.randn(4, 1, 3, 3, 3)}
    out = RandFlip(p=1.0)(batch, gen())
    assert torch.equal(out["vol"], batch["vol"].flip([-3, -2, -1]))
    assert RandomCrop([2, 2, 2])(batch, gen())["vol"].shape == (4, 1, 2, 2, 2)


def test_call_transform_passes_the_generator_only_when_taken() -> None:
    """``call_transform`` calls ``f(item)`` and ``f(item, generator)`` callables alike."""
    got: list[Any] = []
    call_transform(lambda d: got.append("one") or d, {}, gen())
    call_transform(lambda d, generator=None: got.append(generator) or d, {}, gen())
    assert got[0] == "one" and isinstance(got[1], torch.Generator)


def test_built_from_config_equals_built_in_python() -> None:
    """A compose spec from YAML builds a transform that gives the same result as the Python one."""
    spec = {
        "kind": "compose",
        "apply_on": ["vol"],
        "transforms": [
            {"kind": "rand_permute"},
            {"kind": "rand_flip", "flip_probability": 0.7},
            {"kind": "gaussian_noise", "std_deviation": 0.1},
        ],
    }
    from_yaml = build(spec)
    in_python = Compose([RandPermute(), RandFlip(p=0.7), GaussianNoise(std=0.1)], apply_on=["vol"])
    x = item()
    assert torch.equal(from_yaml(x, gen(9))["vol"], in_python(x, gen(9))["vol"])


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"kind": "rand_flip", "dims": [1, 2]}, "distinct negative dims"),
        ({"kind": "rand_flip", "p": 1.5}, "less than or equal to 1"),
        ({"kind": "gaussian_noise", "std": -1}, "greater than or equal to 0"),
        ({"kind": "random_crop", "size": []}, "at least 1 item"),
        ({"kind": "to_dtype", "dtype": "float8"}, "float16"),
        ({"kind": "compose", "transforms": [{"kind": "rand_flp"}]}, "Did you mean 'rand_flip'"),
        ({"kind": "normalize", "std": 0}, "greater than 0"),
    ],
)
def test_transform_specs_refuse_nonsense(data: dict[str, Any], match: str) -> None:
    """Bad dims, probabilities, sizes, dtypes and kinds are refused at validation."""
    with pytest.raises(ValidationError, match=match):
        Holder.model_validate({"transform": data})


def test_every_spec_kind_builds() -> None:
    """Each kind builds from its minimal config into a callable that transforms an item."""
    configs = [
        {"kind": "rand_flip"},
        {"kind": "rand_permute"},
        {"kind": "gaussian_noise"},
        {"kind": "normalize"},
        {"kind": "random_crop", "size": [2, 2]},
        {"kind": "to_dtype", "dtype": "float64"},
        {"kind": "compose", "transforms": [{"kind": "rand_flip"}]},
    ]
    for data in configs:
        out = build(data)({"vol": torch.randn(1, 4, 4, 4)}, gen())
        assert isinstance(out["vol"], torch.Tensor)
