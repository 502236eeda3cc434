"""Every page's code blocks run, in order, as ``docs_pages.py`` says (one test per page)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from docs_pages import PAGES, ROOT, PageRun, blocks

import loaderfactory
from loaderfactory.config import registry
from loaderfactory.testing.s3 import S3Server

pytestmark = pytest.mark.usefixtures("cli_forks")

ON_S3 = [page for page in PAGES if any(block.marker == "needs" for block in blocks(ROOT / page))]
"""Pages with a block marked ``needs s3``."""


def run_page(page: str, run: PageRun) -> None:
    """Run the page's blocks in order; kinds they register are dropped, loaders they leave open closed."""
    kinds = {table: set(registry.available(table)) for table in registry.TABLES}
    try:
        for block in blocks(ROOT / page):
            run.run(block)
    finally:
        for table in registry.TABLES:
            for kind in set(registry.available(table)) - kinds[table]:
                registry.unregister(table, kind)
        for value in run.namespace.values():
            if isinstance(value, loaderfactory.Loader):
                value.close()


@pytest.mark.parametrize("page", [page for page in PAGES if page not in ON_S3])
def test_the_page_runs(page: str, tmp_path: Path) -> None:
    """The page's blocks run in order from one folder of their own."""
    run_page(page, PageRun(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("page", ON_S3)
def test_the_page_runs_on_s3(page: str, s3: S3Server, fsspec_io_thread: None, tmp_path: Path) -> None:
    """The page's blocks run in order, those marked ``needs s3`` against the session's S3 server."""
    run_page(page, PageRun(tmp_path, s3=s3, s3_prefix=f"docs-{uuid.uuid4().hex[:8]}/"))
