"""The README's and the docs pages' fenced blocks, and how ``test_docs.py`` runs them.

A page's blocks run in order, in one folder of their own, so a block may use what an earlier one
made: a Python name, a file, shards a command wrote. What a block is decides how it runs:

- ``python``: executed in the page's one namespace, from the page's folder.
- ``bash``: each command, ``&&``-chained ones included, from the page's folder: ``loaderfactory
  ARGS [> FILE]`` as ``python -m loaderfactory`` from this checkout, which must exit 0 (or N where
  the line's comment says ``exits N``); ``export
  NAME=VALUE`` sets the page's environment; ``pip install ...`` is skipped (the test environment
  is installed; ``test_readme.py`` pins the README's install commands). Any other command needs a
  marker.
- ``console``: each ``$ `` line runs as a ``bash`` command (its exit status unchecked) and the
  lines up to the next ``$ `` are its output, compared with what it printed.
- ``yaml``: a config, checked with ``loaderfactory.validate`` (its ``_target_`` modules imported
  from the page's folder).

An HTML comment on the line before the fence marks a block that runs otherwise:

- ``<!-- docs-test: text -->``: not code (a diagram, output with figures that change between
  runs); nothing runs. Only on ``text`` blocks, and every ``text`` block carries it (or
  ``tested-by``, when a test compares it with what a command printed).
- ``<!-- docs-test: tested-by tests/<folder>/test_x.py::test_name -->``: that test runs the block, with
  what it needs (a server on a free port, checks of its own); the test file names the page.
- ``<!-- docs-test: part-of PATH -->``: the block is an excerpt of the repository's file ``PATH``,
  which its own tests run or compose: a YAML block's keys are the file's with equal values, a
  Python or TOML block's lines are the file's, in order, comments aside (a ``...`` line stands
  for lines left out).
- ``<!-- docs-test: file PATH -->``: the block is written to ``PATH`` in the page's folder, for the
  blocks after it (a module a config names, a YAML file a command reads).
- ``<!-- docs-test: needs s3 -->``: the block runs against the test session's S3 server:
  ``s3://bucket/`` is a fresh prefix in its bucket, ``http://127.0.0.1:8333`` and
  ``http://localhost:8333`` its endpoint, and its ``AWS_*`` variables are set for the block.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from cli_forks import run_command

ROOT = Path(__file__).resolve().parents[2]
NOT_RUN = {
    "docs/benchmarks.md": "benchmark runs and their figures: `benchmarks/` prints them; never a test",
}
"""Pages whose blocks no test runs, and why."""
PAGES = sorted(
    str(page.relative_to(ROOT))
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    if str(page.relative_to(ROOT)) not in NOT_RUN
)
"""The README and the docs pages, as paths from the repository's root."""
MARKERS = ("text", "tested-by", "part-of", "file", "needs")
DOCUMENTED_ENDPOINTS = ("http://127.0.0.1:8333", "http://localhost:8333")
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!-- docs-test: ([a-z-]+)(?: ([^>]*?))? -->[ \t]*\n\Z")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and its marker (``None``: none)."""

    page: str
    line: int
    language: str
    text: str
    marker: str | None = None
    argument: str = ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order, each with the marker on the line before it."""
    text = page.read_text()
    name = str(page.relative_to(ROOT))
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()]
        marker = _MARKER.search(before[before.rfind("\n", 0, len(before) - 1) + 1 :])
        found.append(
            Block(
                page=name,
                line=before.count("\n") + 1,
                language=match[1].strip(),
                text=match[2],
                marker=marker[1] if marker else None,
                argument=(marker[2] or "").strip() if marker else "",
            )
        )
    return found


def marker_problems(block: Block) -> list[str]:
    """What is wrong with how ``block`` is marked (nothing when it runs, or is marked, as it should)."""
    where, marker = block.where, block.marker
    if marker is not None and marker not in MARKERS:
        return [f"{where}: unknown marker {marker!r}; known: {', '.join(MARKERS)}"]
    if marker == "text" and block.language != "text":
        return [f"{where}: 'text' marks non-code blocks only; this is a {block.language or 'bare'} block"]
    if block.language == "text" and marker not in ("text", "tested-by"):
        return [f"{where}: a text block carries <!-- docs-test: text -->, or tested-by a test that checks it"]
    if marker in ("tested-by", "part-of", "file", "needs") and not block.argument:
        return [f"{where}: {marker} names what it means (a test, a file, a server)"]
    if marker == "needs" and block.argument != "s3":
        return [f"{where}: needs takes 's3', got {block.argument!r}"]
    if marker is None and block.language not in ("python", "bash", "console", "yaml"):
        return [f"{where}: a {block.language or 'bare'} block runs only with a marker (part-of, tested-by)"]
    return []


def is_part_of(block: Block) -> str | None:
    """Why ``block`` is not an excerpt of the file its ``part-of`` marker names (``None``: it is)."""
    path = ROOT / block.argument
    if not path.is_file():
        return f"{block.where}: part-of {block.argument}: no such file"
    if block.language == "yaml":
        return _subset(yaml.safe_load(block.text), yaml.safe_load(path.read_text()), block.argument)
    if block.language in ("python", "toml"):
        lines = iter(_code(line) for line in path.read_text().splitlines())
        for wanted in map(_code, block.text.splitlines()):
            if wanted not in ("", "...") and wanted not in lines:
                return f"{block.where}: {wanted!r} is not in {block.argument} (in this order)"
        return None
    return f"{block.where}: part-of compares yaml, python and toml blocks"


def _code(line: str) -> str:
    """A line without its indentation and comment (a ``  #`` comment: a crude cut, enough here)."""
    code = line.split("  #")[0].strip()
    return "" if code.startswith("#") else code


def _subset(part: Any, whole: Any, where: str) -> str | None:
    if isinstance(part, Mapping) and isinstance(whole, Mapping):
        for key, value in part.items():
            if key not in whole:
                return f"{where}: has no key {key!r}"
            problem = _subset(value, whole[key], f"{where}.{key}")
            if problem:
                return problem
        return None
    return None if part == whole else f"{where}: {part!r} differs from the file's {whole!r}"


@dataclass
class PageRun:
    """The state a page's blocks share: its folder, Python namespace and environment."""

    folder: Path
    namespace: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    s3: Any = None  # the session's S3 server, for blocks marked ``needs s3``
    s3_prefix: str = ""
    _extra: dict[str, str] = field(default_factory=dict)  # the variables of the block running now

    def run(self, block: Block) -> None:
        """Run ``block`` as its language and marker say (see the module's docstring)."""
        if block.marker in ("text", "tested-by", "part-of"):
            return
        if block.marker == "file":
            path = self.folder / block.argument
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text)
            return
        if block.marker == "needs":
            block = replace(block, text=self._on_s3(block.text))
        with self._environment(s3=block.marker == "needs"):
            getattr(self, f"_run_{block.language}")(block)

    def _on_s3(self, text: str) -> str:
        assert self.s3 is not None, "the page test passes the S3 server to pages that need it"
        text = text.replace("s3://bucket/", self.s3.url(self.s3_prefix))
        for endpoint in DOCUMENTED_ENDPOINTS:
            text = text.replace(endpoint, self.s3.storage_options["endpoint_url"])
        return text

    @contextmanager
    def _environment(self, s3: bool) -> Iterator[None]:
        self._extra = {**self.env, **(self.s3.environment if s3 else {})}
        saved, cwd, path = dict(os.environ), Path.cwd(), list(sys.path)
        os.environ.update(self._extra)
        os.chdir(self.folder)
        sys.path.insert(0, str(self.folder))
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)
            os.chdir(cwd)
            sys.path[:] = path
            for name, module in list(sys.modules.items()):  # a page's own modules (my_data.py) go
                if str(getattr(module, "__file__", None) or "").startswith(str(self.folder)):
                    del sys.modules[name]

    def _run_python(self, block: Block) -> None:
        exec(compile(block.text, block.where, "exec"), self.namespace)

    def _run_yaml(self, block: Block) -> None:
        import loaderfactory

        loaderfactory.validate(yaml.safe_load(block.text))

    def _run_bash(self, block: Block) -> None:
        for line in _command_lines(block.text):
            said = re.search(r"#.*\bexits (\d+)", line)  # `# ...; exits 2 listing every problem`
            for command in _split_and(line):
                done = self.command(command, block)
                status = int(said[1]) if said else 0
                assert done is None or done[0] == status, f"{block.where}: {command}\n{done[1][-3000:]}"

    def _run_console(self, block: Block) -> None:
        parts = re.split(r"^\$ ", block.text, flags=re.MULTILINE)
        assert parts[0] == "", f"{block.where}: a console block starts with a `$ ` line"
        for part in parts[1:]:
            command, _, shown = part.partition("\n")
            done = self.command(command, block)
            assert done is not None, f"{block.where}: {command} prints nothing to compare"
            assert done[1].strip() == shown.strip(), f"{block.where}: {command} printed\n{done[1]}"

    def command(self, command: str, block: Block) -> tuple[int, str] | None:
        """Run one shell command of ``block``: its exit status and output (``None``: nothing ran)."""
        argv = shlex.split(command, comments=True)
        if not argv or argv[:2] == ["pip", "install"]:
            return None
        if argv[0] == "export" and len(argv) == 2 and "=" in argv[1]:
            name, value = argv[1].split("=", 1)
            self.env[name] = self._extra[name] = value
            return None
        assert argv[0] == "loaderfactory", f"{block.where}: {command!r} runs only with a marker"
        args, out = argv[1:], None
        if ">" in args:
            args, out = args[: args.index(">")], args[args.index(">") + 1]
        done = run_command(self.folder, *args, env=self._extra, timeout=300)
        if out is not None:
            (self.folder / out).write_text(done.stdout)
            return done.returncode, done.stderr
        return done.returncode, done.stdout + done.stderr


def _command_lines(text: str) -> list[str]:
    """A bash block's commands, a line each (a trailing ``\\`` joins the next line)."""
    return [line for line in text.replace("\\\n", " ").splitlines() if line.strip()]


def _split_and(line: str) -> list[str]:
    return [part.strip() for part in line.split(" && ")]
