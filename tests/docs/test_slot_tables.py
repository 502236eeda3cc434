"""The slot tables of README.md and docs/index.md name registered kinds and point to the full list.

They name the kinds to start with, not all of them, so a new kind needs no edit there; the generated
reference lists every kind (``tests/docs/test_readme.py`` checks that).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loaderfactory.config import registry

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"README.md": "docs/reference.md", "docs/index.md": "reference.md"}
"""Each page with a slot table, and its link to the reference."""


def _kinds_cells(text: str) -> dict[str, str]:
    """Each slot table row's kinds cell, by slot."""
    rows = re.findall(r"^\| `([a-z_]+)` \| ([^|]*) \|", text, flags=re.MULTILINE)
    return {slot: cell for slot, cell in rows if slot in registry.SLOTS}


def _kind_names(cell: str) -> list[str]:
    """The kind names a cell quotes; `_target_` and `dataset=` are ways to give a dataset, not kinds."""
    return [name for name in re.findall(r"`([^`]+)`", cell) if re.fullmatch(r"[a-z][a-z0-9_]*", name)]


@pytest.mark.parametrize("page", PAGES)
def test_the_slot_table_has_a_row_per_slot_naming_registered_kinds(page: str) -> None:
    """Every slot has a row, in pipeline order, and every kind a row names is registered in that slot."""
    cells = _kinds_cells((ROOT / page).read_text())
    assert list(cells) == list(registry.SLOTS)
    unknown = {
        slot: [name for name in _kind_names(cell) if name not in registry.available(slot)]
        for slot, cell in cells.items()
    }
    assert {slot: names for slot, names in unknown.items() if names} == {}
    assert all(_kind_names(cell) for cell in cells.values()), "each row names at least one kind"


@pytest.mark.parametrize(("page", "link"), PAGES.items())
def test_the_page_says_the_reference_lists_every_kind(page: str, link: str) -> None:
    """Beside the table, the page links the generated reference as the list of every kind."""
    text = " ".join((ROOT / page).read_text().split())
    assert f"[the config reference]({link}) lists every registered kind" in text
