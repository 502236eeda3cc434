"""What every figure panel writes around its plot: a title, both axis labels and the legend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes


LegendAt = Literal["best", "upper right", "lower right"]


def label_panel(ax: Axes, title: str, xlabel: str, ylabel: str, legend: LegendAt = "best") -> None:
    """The panel's title and axis labels, and its legend at ``legend``."""
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(loc=legend, fontsize=8)
