"""``python -m loaderfactory.testing.s3``: the ``loaderfactory s3-server`` command
(:mod:`loaderfactory.testing.s3_command`)."""

import sys

from loaderfactory.testing.s3_command import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
