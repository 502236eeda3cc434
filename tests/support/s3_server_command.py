"""``loaderfactory s3-server`` started as a terminal starts it, read until it prints its settings."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import psutil
import pytest
from command_process import read_until, start_command

from loaderfactory.testing import s3

SETTINGS = re.compile(rb"export AWS_ENDPOINT_URL=(\S+)\n")
"""The last line of the settings the command prints."""


def start_server(command: list[str], folder: Path) -> tuple[subprocess.Popen[bytes], str, int]:
    """``command`` (``... s3-server ...``) started in ``folder``; once its settings are printed: the
    process, what it printed and its one child, ``weed``."""
    if s3.weed_binary() is None:
        pytest.skip("SeaweedFS is not installed (the test extra has it)")
    server = start_command(command, folder)
    assert server.stdout is not None
    try:
        printed = read_until(server.stdout.fileno(), SETTINGS.search, "settings", timeout=120).decode()
        (weed,) = psutil.Process(server.pid).children()
    except BaseException:
        server.kill()
        server.communicate()
        raise
    assert "weed" in weed.name()
    return server, printed, weed.pid
