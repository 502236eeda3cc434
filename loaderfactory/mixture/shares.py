"""How a mixture's shares go over a run: each source's share of the samples drawn, step after step,
against its target; as numbers, and as a figure panel (the run figure's, or one of its own)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from loaderfactory.panels import label_panel

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from loaderfactory.mixture.dataset import MixtureDataset

SHARES_TITLE = "mixture shares"
POINTS = 200
"""Steps a curve is drawn at, at most."""


@dataclass(frozen=True)
class SharesOverSteps:
    """Each source's share of the samples drawn between one step shown and the next (``achieved``),
    and what its weights asked there (``target``): rows follow ``steps``, columns ``names``."""

    names: list[str]
    steps: np.ndarray
    achieved: np.ndarray
    target: np.ndarray


def shares_over_steps(mixture: MixtureDataset, samples_per_step: int, steps: int) -> SharesOverSteps:
    """The shares of a run of ``steps`` steps of ``samples_per_step`` samples (all ranks together),
    epoch after epoch, worked out from the mixture alone: nothing is read."""
    shown = np.unique(np.linspace(0, steps, min(POINTS, steps) + 1).astype(np.int64))
    drawn, wanted = [], []
    for step in shown:
        epoch, position = divmod(int(step) * samples_per_step, mixture.length)
        shares = mixture.shares(epoch, position)
        drawn.append([shares[name]["drawn_since_start"] for name in mixture.names])
        wanted.append([shares[name]["target_since_start"] for name in mixture.names])
    achieved, target = _per_window(np.asarray(drawn, float)), _per_window(np.asarray(wanted, float))
    return SharesOverSteps(mixture.names, shown[1:], achieved, target)


def _per_window(cumulative: np.ndarray) -> np.ndarray:
    between = np.diff(cumulative, axis=0)
    totals = between.sum(axis=1, keepdims=True)
    return between / np.where(totals > 0, totals, 1)


def draw_shares(ax: Axes, shares: SharesOverSteps) -> None:
    """Achieved shares as solid lines, targets dashed, one colour per source."""
    colours = ["#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb"]
    for column, name in enumerate(shares.names):
        colour = colours[column % len(colours)]
        ax.plot(shares.steps, shares.achieved[:, column], color=colour, linewidth=1.2, label=name)
        ax.plot(shares.steps, shares.target[:, column], color=colour, linewidth=1, linestyle="--")
    ax.set_ylim(0, 1)
    title = f"{SHARES_TITLE} (solid: drawn between the steps shown; dashed: the target)"
    label_panel(ax, title, "steps", "share of the samples", legend="upper right")


def save_shares_figure(shares: SharesOverSteps, path: Path) -> Path:
    """Write the shares panel alone as a PNG; returns ``path``."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 3.4), layout="constrained")
    draw_shares(figure.add_subplot(1, 1, 1), shares)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    return path
