"""``run.mode=plan`` for a mixture: what each epoch reads of each source, and where each runs out."""

from __future__ import annotations

from typing import Any

from loaderfactory.mixture.dataset import MixtureDataset
from loaderfactory.mixture.epochs import passes

EPOCHS_SHOWN = 5
"""Epochs a scheduled mixture's plan shows (fixed weights: every epoch is the first)."""


def mixture_plan(mixture: MixtureDataset) -> dict[str, Any]:
    """Per epoch shown, each source's samples, passes and the position its first pass ends at; and
    the memory the sources' orders take (two passes' orders per source, 8 bytes an index)."""
    epochs = range(EPOCHS_SHOWN if mixture.timeline.scheduled else 1)
    return {
        "epoch_length": mixture.length,
        "scheduled": mixture.timeline.scheduled,
        "order_bytes": 2 * 8 * sum(mixture.sizes),
        "epochs": [_epoch(mixture, epoch) for epoch in epochs],
    }


def _epoch(mixture: MixtureDataset, epoch: int) -> dict[str, Any]:
    drawn = mixture.draws(epoch)
    taken = passes(drawn, mixture.sizes)
    return {
        name: {
            "samples": int(drawn[s]),
            "passes": taken[s],
            "share": float(drawn[s]) / max(mixture.length, 1),
            "runs_out_at": _runs_out_at(mixture, epoch, s),
        }
        for s, name in enumerate(mixture.names)
    }


def _runs_out_at(mixture: MixtureDataset, epoch: int, source: int) -> int | None:
    """The first position of ``epoch`` by which ``source`` has given every sample once; None: never."""
    size, timeline = mixture.sizes[source], mixture.timeline
    if timeline.drawn(epoch, mixture.length)[source] < size:
        return None
    low, high = 0, mixture.length
    while low < high:  # draws never decrease along the epoch
        middle = (low + high) // 2
        if timeline.drawn(epoch, middle)[source] >= size:
            high = middle
        else:
            low = middle + 1
    return low


def format_mixture_plan(plan: dict[str, Any]) -> list[str]:
    """The plan's lines: one per epoch shown and source."""
    lines = [
        f"mixture: {plan['epoch_length']} samples an epoch"
        + (" (weights on a schedule: the first epochs)" if plan["scheduled"] else "")
        + f"; sources' orders hold {plan['order_bytes'] / 2**20:.1f} MiB",
    ]
    for number, epoch in enumerate(plan["epochs"]):
        for name, source in epoch.items():
            out = source["runs_out_at"]
            ends = f"read whole by position {out}" if out is not None else "not read whole"
            lines.append(
                f"  epoch {number}  {name}: {source['samples']} samples ({source['share']:.1%}), "
                f"{source['passes']} pass(es), {ends}"
            )
    return lines
