"""docs/recipes/image-folder.md runs as written against the session's S3 server: an image folder
packed to S3, read shuffled by two workers, stopped and resumed, every batch of the epoch once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from cli_forks import ROOT
from image_data import write_jpeg_folder
from s3_server import S3Server

RECIPE = (ROOT / "docs" / "recipes" / "image-folder.md").read_text()


def _block(language: str) -> str:
    (block,) = re.findall(rf"```{language}\n(.*?)```", RECIPE, flags=re.DOTALL)
    return str(block)


def test_the_recipe_is_thirty_lines_and_starts_the_documented_server() -> None:
    code = [
        line for line in _block("python").splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    assert len(code) <= 30, len(code)
    assert _block("bash").strip() == "loaderfactory s3-server --dir data/s3"


@pytest.mark.slow
def test_the_recipe_runs_as_written(s3: S3Server, fsspec_io_thread: None, tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path / "photos", 20)
    prefix = s3.url(f"recipe-{uuid.uuid4().hex[:8]}/photos/")
    code = _block("python").replace("s3://data/photos/", prefix)
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env |= s3.environment | {"PYTHONPATH": str(ROOT)}  # the `export` lines the server prints
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    promised = re.search(r"it prints `(.+?)`", RECIPE.replace("\n", " "))
    assert promised and done.stdout.strip().splitlines()[-1] == promised[1]
