"""Seeded transforms of dict items (or dict batches): ``transform(item, generator=None) -> dict``.

Each transform draws its randomness once per call from the ``torch.Generator`` it is given (the
global one when ``None``), so every key it touches gets the same flip, permutation or crop: a
volume and its mask stay aligned. ``apply_on`` names the keys; ``None`` picks every tensor the
transform can handle. Items are never edited in place: a transform returns a new dict with new
tensors for the keys it changed, so a queue can hand the same stored item out again unchanged.
Dims are counted from the end (``-3, -2, -1`` are the spatial dims of a ``C×D×H×W`` volume), so
the same transform works on a sample and on a batch (where it applies one draw to the whole batch).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

Item = dict[str, Any]
TransformFn = Callable[..., Item]


def _uniform(generator: torch.Generator | None) -> float:
    return float(torch.rand((), generator=generator))


class Transform:
    """Base of the built-in transforms: key selection, probability ``p`` and the call protocol.

    Args:
        apply_on: keys to transform; ``None``: every tensor the transform can handle.
        p: probability of applying the transform at all on a call.
    """

    def __init__(self, apply_on: Sequence[str] | None = None, p: float = 1.0) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        if isinstance(apply_on, str):
            raise TypeError(f"apply_on must be a list of keys, got the string {apply_on!r}")
        self.apply_on = list(apply_on) if apply_on is not None else None
        self.p = p

    def handles(self, value: Any) -> bool:
        """Whether a key not named in ``apply_on`` is transformed by default."""
        return isinstance(value, torch.Tensor)

    def keys(self, item: Mapping[str, Any]) -> list[str]:
        if self.apply_on is None:
            return [key for key, value in item.items() if self.handles(value)]
        missing = [key for key in self.apply_on if key not in item]
        if missing:
            raise KeyError(
                f"{type(self).__name__}: apply_on keys {missing} are not in the item; it has {sorted(item)}"
            )
        for key in self.apply_on:
            if not isinstance(item[key], torch.Tensor):
                raise TypeError(
                    f"{type(self).__name__}: item[{key!r}] is a {type(item[key]).__name__}, not a tensor"
                )
        return list(self.apply_on)

    def params(self, tensors: dict[str, torch.Tensor], generator: torch.Generator | None) -> Any:
        """Random choices for this call, shared by every key."""
        return None

    def apply(
        self, key: str, tensor: torch.Tensor, params: Any, generator: torch.Generator | None
    ) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, item: Mapping[str, Any], generator: torch.Generator | None = None) -> Item:
        if not isinstance(item, Mapping):
            raise TypeError(f"{type(self).__name__} needs a dict item, got {type(item).__name__}")
        out = dict(item)
        if self.p < 1.0 and _uniform(generator) >= self.p:
            return out
        tensors = {key: item[key] for key in self.keys(item)}
        if not tensors:
            return out
        params = self.params(tensors, generator)
        for key, tensor in tensors.items():
            out[key] = self.apply(key, tensor, params, generator)
        return out

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


def takes_generator(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` follows ``fn(item, generator=None)`` (plain ``fn(item)`` callables work too)."""
    if isinstance(fn, Transform | Compose):
        return True
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    params = list(parameters)
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    # ``f(item, factor=2.0)`` is a plain transform with an option, not ``f(item, generator)``.
    second_required = len(positional) >= 2 and positional[1].default is inspect.Parameter.empty
    return (
        any(p.name == "generator" for p in params)
        or second_required
        or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    )


def call_transform(fn: TransformFn, item: Any, generator: torch.Generator | None) -> Any:
    """Call a transform with the generator if it takes one."""
    return fn(item, generator) if takes_generator(fn) else fn(item)


class Compose:
    """Apply transforms in order; ``apply_on`` (if given) replaces each built-in child's own keys.

    Args:
        transforms: transforms or plain ``f(item) -> item`` callables.
        apply_on: keys for every built-in child (``Compose([...], apply_on=["vol"])``).
        p: probability of applying the whole chain.
    """

    transforms: list[TransformFn]
    apply_on: list[str] | None
    p: float

    def __init__(
        self, transforms: Sequence[TransformFn], apply_on: Sequence[str] | None = None, p: float = 1.0
    ) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        children: list[TransformFn] = []
        for child in transforms:
            if not callable(child):
                raise TypeError(f"Compose: {child!r} is not callable")
            if apply_on is not None and isinstance(child, Transform):
                child = copy.copy(child)
                child.apply_on = list(apply_on)
            elif apply_on is not None and isinstance(child, Compose):
                child = Compose(child.transforms, apply_on, child.p)
            children.append(child)
        self.transforms = children
        self.apply_on = list(apply_on) if apply_on is not None else None
        self.p = p

    def __call__(self, item: Mapping[str, Any], generator: torch.Generator | None = None) -> Item:
        out = dict(item)
        if self.p < 1.0 and _uniform(generator) >= self.p:
            return out
        for child in self.transforms:
            out = call_transform(child, out, generator)
        return out

    def __repr__(self) -> str:
        return f"Compose({self.transforms!r}, apply_on={self.apply_on!r}, p={self.p})"


def _check_dims(name: str, dims: Sequence[int]) -> list[int]:
    dims = list(dims)
    if not dims or any(d >= 0 for d in dims) or len(set(dims)) != len(dims):
        raise ValueError(
            f"{name}: dims must be distinct negative dims counted from the end, e.g. [-3, -2, -1]; got {dims}"
        )
    return dims


class RandFlip(Transform):
    """Flip each of ``dims`` independently with probability ``p``."""

    def __init__(
        self, dims: Sequence[int] = (-3, -2, -1), apply_on: Sequence[str] | None = None, p: float = 0.5
    ) -> None:
        super().__init__(apply_on, 1.0)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.flip_p = p
        self.dims = _check_dims("rand_flip", dims)

    def handles(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.ndim >= len(self.dims)

    def params(self, tensors: dict[str, torch.Tensor], generator: torch.Generator | None) -> list[int]:
        draws = torch.rand(len(self.dims), generator=generator)
        return [d for d, u in zip(self.dims, draws.tolist(), strict=True) if u < self.flip_p]

    def apply(
        self, key: str, tensor: torch.Tensor, params: Any, generator: torch.Generator | None
    ) -> torch.Tensor:
        return tensor.flip(params) if params else tensor


class RandPermute(Transform):
    """Permute ``dims`` at random (all orders equally likely), with probability ``p``."""

    def __init__(
        self, dims: Sequence[int] = (-3, -2, -1), apply_on: Sequence[str] | None = None, p: float = 1.0
    ) -> None:
        super().__init__(apply_on, p)
        self.dims = _check_dims("rand_permute", dims)

    def handles(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.ndim >= len(self.dims)

    def params(self, tensors: dict[str, torch.Tensor], generator: torch.Generator | None) -> list[int]:
        order = torch.randperm(len(self.dims), generator=generator).tolist()
        return [self.dims[i] for i in order]

    def apply(
        self, key: str, tensor: torch.Tensor, params: Any, generator: torch.Generator | None
    ) -> torch.Tensor:
        order = list(range(tensor.ndim))
        for source, target in zip(self.dims, params, strict=True):
            order[tensor.ndim + source] = tensor.ndim + target
        return tensor.permute(order)


class GaussianNoise(Transform):
    """Add noise drawn from ``N(mean, std²)`` to floating-point tensors, with probability ``p``."""

    def __init__(
        self, std: float = 0.01, mean: float = 0.0, apply_on: Sequence[str] | None = None, p: float = 1.0
    ) -> None:
        super().__init__(apply_on, p)
        if std < 0:
            raise ValueError(f"gaussian_noise: std must be >= 0, got {std}")
        self.std = std
        self.mean = mean

    def handles(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.is_floating_point()

    def apply(
        self, key: str, tensor: torch.Tensor, params: Any, generator: torch.Generator | None
    ) -> torch.Tensor:
        if not tensor.is_floating_point():
            raise TypeError(
                f"gaussian_noise: item[{key!r}] has dtype {tensor.dtype}; noise needs a float tensor"
            )
        noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32)
        return (tensor.float() + noise * self.std + self.mean).to(tensor.dtype)


class Normalize(Transform):
    """``(x - mean) / std``; ``None`` for either uses the tensor's own statistics (standardise).

    Lists of ``mean``/``std`` are per channel along ``channel_dim`` (``0`` for a ``C×...`` sample;
    use ``1`` in batch transforms).
    """

    def __init__(
        self,
        mean: float | Sequence[float] | None = None,
        std: float | Sequence[float] | None = None,
        channel_dim: int = 0,
        eps: float = 1e-8,
        apply_on: Sequence[str] | None = None,
    ) -> None:
        super().__init__(apply_on, 1.0)
        self.mean = mean
        self.std = std
        self.channel_dim = channel_dim
        self.eps = eps

    def handles(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.is_floating_point()

    def _stat(self, value: float | Sequence[float], tensor: torch.Tensor) -> torch.Tensor | float:
        if isinstance(value, int | float):
            return float(value)
        stat = torch.tensor(list(value), dtype=torch.float32)
        dim = self.channel_dim % tensor.ndim
        if tensor.shape[dim] != len(stat):
            raise ValueError(
                f"normalize: {len(stat)} per-channel values but dim {self.channel_dim} of a tensor "
                f"of shape {tuple(tensor.shape)} has {tensor.shape[dim]} channels"
            )
        shape = [1] * tensor.ndim
        shape[dim] = len(stat)
        return stat.view(shape)

    def apply(
        self, key: str, tensor: torch.Tensor, params: Any, generator: torch.Generator | None
    ) -> torch.Tensor:
        x = tensor.float()
        mean = x.mean() if self.mean is None else self._stat(self.mean, x)
        std = x.std() if self.std is None else self._stat(self.std, x)
        return ((x - mean) / (std + self.eps)).to(tensor.dtype)


class RandomCrop(Transform):
    """Crop the trailing ``len(size)`` dims to ``size`` at one random offset shared by every key."""

    def __init__(self, size: Sequence[int], apply_on: Sequence[str] | None = None) -> None:
        super().__init__(apply_on, 1.0)
        if not size or any(s < 1 for s in size):
            raise ValueError(f"random_crop: size must be a list of positive ints, got {list(size)}")
        self.size = list(size)

    def handles(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.ndim >= len(self.size)

    def params(self, tensors: dict[str, torch.Tensor], generator: torch.Generator | None) -> list[int]:
        n = len(self.size)
        shapes = {key: tuple(t.shape[-n:]) for key, t in tensors.items()}
        if len(set(shapes.values())) > 1:
            raise ValueError(
                f"random_crop: the keys' last {n} dims differ, so one crop cannot fit all: {shapes}"
            )
        shape = next(iter(shapes.values()))
        if len(shape) < n or any(have < want for have, want in zip(shape, self.size, strict=True)):
            raise ValueError(f"random_crop: cannot crop {self.size} out of {shapes}")
        return [
            int(torch.randint(0, have - want + 1, (), generator=generator))
            for have, want in zip(shape, self.size, strict=True)
        ]

    def apply(
        self, key: str, tensor: torch.Tensor, params: Any, generator: torch.Generator | None
    ) -> torch.Tensor:
        index = (Ellipsis, *(slice(o, o + s) for o, s in zip(params, self.size, strict=True)))
        return tensor[index]  # type: ignore[index]  # a tuple of Ellipsis and slices is a valid index


class ToDtype(Transform):
    """Convert tensors to ``dtype`` (a ``torch.dtype`` or its name, e.g. ``"float16"``)."""

    def __init__(self, dtype: torch.dtype | str, apply_on: Sequence[str] | None = None) -> None:
        super().__init__(apply_on, 1.0)
        resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
        if not isinstance(resolved, torch.dtype):
            raise ValueError(f"to_dtype: {dtype!r} is not a torch dtype")
        self.dtype = resolved

    def apply(
        self, key: str, tensor: torch.Tensor, params: Any, generator: torch.Generator | None
    ) -> torch.Tensor:
        return tensor.to(self.dtype)
