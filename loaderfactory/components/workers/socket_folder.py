"""Refuse a temporary folder too long for torch to share tensors between processes.

A worker process sends each tensor it shares as a file descriptor over a Unix socket made in
multiprocessing's folder under the temporary folder (``<tmp>/pymp-xxxxxxxx/listener-xxxxxxxx``).
A socket's path holds at most 107 bytes; past that, the worker fails to send the batch on a
background thread that only prints the error, and the consumer would wait for it forever.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import tempfile

SOCKET_PATH_BYTES = 107
"""The longest path of a Unix socket (``sun_path`` holds 108 bytes with its final NUL)."""
_LISTENER = len("/listener-xxxxxxxx")
_MP_FOLDER = len("/pymp-xxxxxxxx")


def check_socket_folder() -> None:
    """OSError (``ENAMETOOLONG``) saying what to set when sockets in the temporary folder would be
    too long for torch's tensor sharing."""
    made = multiprocessing.current_process()._config.get("tempdir")  # type: ignore[attr-defined]
    folder = made if made is not None else tempfile.gettempdir()
    longest = len(os.fsencode(folder)) + (0 if made is not None else _MP_FOLDER) + _LISTENER
    if longest > SOCKET_PATH_BYTES:
        raise OSError(
            errno.ENAMETOOLONG,
            f"the temporary folder {folder!r} is too long for worker processes: torch passes their"
            f" tensors over Unix sockets made in it, whose paths hold at most {SOCKET_PATH_BYTES}"
            f" bytes (these would take {longest}); set TMPDIR to a shorter folder, such as /tmp,"
            " or use num_workers=0 or thread workers",
        )
