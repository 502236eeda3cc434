"""The docs site builds, its pages are all in its nav, and every code block of the README and the docs
runs or carries a marker that says how (``docs_pages.py``; ``test_docs_pages.py`` runs them)."""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import PAGES, ROOT, Block, PageRun, blocks, is_part_of, marker_problems

import loaderfactory

pytestmark = pytest.mark.usefixtures("cli_forks")

WRITING_SHARDS = "docs/guides/writing-shards.md"


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(ROOT / page)]


def test_the_site_builds_with_every_warning_an_error(tmp_path: Path) -> None:
    """``mkdocs build --strict`` builds the site (nav, links, anchors, the API page) without a warning."""
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml")]
    done = subprocess.run(
        [*command, "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").is_file()


def test_the_nav_lists_every_page() -> None:
    """Each page under docs/ is in the nav, and the nav names no missing page."""
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.MULTILINE)
    pages = sorted(str(page.relative_to(ROOT / "docs")) for page in (ROOT / "docs").rglob("*.md"))
    assert sorted(nav) == pages


def test_the_api_page_documents_exactly_the_public_names() -> None:
    """docs/api.md has one ``:::`` entry per name of ``loaderfactory.__all__``, at its defining module."""
    entries = re.findall(r"^::: (\S+)$", (ROOT / "docs" / "api.md").read_text(), flags=re.MULTILINE)
    exports = loaderfactory._EXPORTS
    assert entries == [f"{exports[name]}.{name}" for name in loaderfactory.__all__]


def test_every_block_runs_or_carries_a_marker() -> None:
    """A block runs as its language says, or its marker says how it runs; ``text`` marks text only."""
    problems = [problem for block in all_blocks() for problem in marker_problems(block)]
    assert not problems, "\n".join(problems)


def test_a_marker_on_a_code_block_is_refused() -> None:
    """The ``text`` marker on a Python block, and a bare block without one, are reported."""
    python = Block("page.md", 3, "python", "print(1)\n", marker="text")
    assert marker_problems(python) == ["page.md:3: 'text' marks non-code blocks only; this is a python block"]
    assert marker_problems(Block("page.md", 3, "", "x\n")) == [
        "page.md:3: a bare block runs only with a marker (part-of, tested-by)"
    ]
    assert marker_problems(Block("page.md", 3, "text", "x\n")) == [
        "page.md:3: a text block carries <!-- docs-test: text -->, or tested-by a test that checks it"
    ]


def test_a_block_that_does_not_do_what_it_shows_fails(tmp_path: Path) -> None:
    """Output that differs from what was printed, a command's other exit status and an excerpt that
    is not its file's are each reported, naming the block."""
    run = PageRun(tmp_path)
    shown = "$ loaderfactory run.mode=validate loader.batch_size=0\nloaderfactory: all good\n"
    with pytest.raises(AssertionError, match=r"page\.md:3: loaderfactory run\.mode=validate .* printed"):
        run.run(Block("page.md", 3, "console", shown))
    with pytest.raises(AssertionError, match=r"page\.md:5: loaderfactory run\.mode=validate"):
        run.run(Block("page.md", 5, "bash", "loaderfactory run.mode=validate loader.batch_size=0\n"))
    run.run(Block("page.md", 7, "bash", "loaderfactory run.mode=validate loader.batch_size=0  # exits 2\n"))
    preset = "conf/loaderfactory/prefetch/thread.yaml"
    assert is_part_of(Block("page.md", 9, "yaml", "buffer_size: 3\n", "part-of", preset)) == (
        f"{preset}.buffer_size: 3 differs from the file's 1"
    )


def test_excerpts_are_the_files_they_name() -> None:
    """Each ``part-of`` block is an excerpt of its file: the same keys and values, the same lines."""
    problems = [is_part_of(block) for block in all_blocks() if block.marker == "part-of"]
    assert not [problem for problem in problems if problem], problems


def test_blocks_tested_elsewhere_name_a_test_of_their_page() -> None:
    """``tested-by`` names a test function that exists, in a file that reads the block's page."""
    for block in all_blocks():
        if block.marker != "tested-by":
            continue
        path, _, name = block.argument.partition("::")
        source = (ROOT / path).read_text()
        functions = {node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)}
        assert name in functions, f"{block.where}: no test {block.argument}"
        page = Path(block.page)
        assert page.name in source or f'"{page.parent.name}", "{page.name}"' in source, block.where


@pytest.mark.slow
def test_the_pack_and_read_back_example_runs(tmp_path: Path) -> None:
    """The writing-shards guide's two commands pack the synthetic data, then read it back with two
    workers, whose reads the report counts (the table's shard rows as the guide shows them)."""
    guide = (ROOT / WRITING_SHARDS).read_text()
    pack, read = re.findall(
        r"```bash\n(loaderfactory run\.mode=pack dataset=synthetic pack\.out=data/shards)\n"
        r"(loaderfactory dataset=shards dataset\.urls=data/shards loader\.num_workers=2)\n```",
        guide,
    )[0]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    outputs = []
    for command in (pack, read):
        argv = [sys.executable, "-m", *shlex.split(command)]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout + done.stderr)
    (report,) = tmp_path.glob("outputs/*/*/report.json")
    shards = json.loads(report.read_text())["shards"]
    data = sum(path.stat().st_size for path in (tmp_path / "data" / "shards").glob("*.tar"))
    assert shards["processes"] == 3 and shards["bytes_read_local"] >= data
    table = re.search(r"```text\n(shards opened .*?)```", guide, flags=re.DOTALL)
    assert table is not None
    for line in table[1].splitlines():
        assert line.split("  ")[0] in outputs[1]
