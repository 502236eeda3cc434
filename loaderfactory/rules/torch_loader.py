"""The rules across the ``torch`` loader's sampling arguments: torch's own ``DataLoader`` rules."""

from __future__ import annotations

from typing import Any

from loaderfactory.rules import Problem


def sampling_problems(
    batch_size: int | None, shuffle: bool, sampler: Any, batch_sampler: Any, drop_last: bool
) -> list[Problem]:
    """batch_sampler excludes batch_size (null), shuffle, sampler and drop_last; a sampler excludes
    shuffle; drop_last needs a batch_size."""
    problems: list[Problem] = []
    if batch_sampler is not None:
        reason = "batch_sampler makes the batches (and their order); "
        if batch_size is not None:
            problems.append(("batch_size", reason + "set batch_size to null", batch_size))
        for name, value in (("shuffle", shuffle), ("drop_last", drop_last)):
            if value:
                problems.append((name, reason + f"set {name} to false", True))
        if sampler is not None:
            problems.append(("sampler", reason + "drop the sampler", sampler))
    elif sampler is not None and shuffle:
        problems.append(("shuffle", "the sampler gives the order; set shuffle to false", True))
    if batch_size is None and drop_last and batch_sampler is None:
        problems.append(
            ("drop_last", "batch_size null makes no batches to drop; set drop_last to false", True)
        )
    return problems
