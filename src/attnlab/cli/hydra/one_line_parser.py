"""``argparse`` for the commands that take paths rather than a config (attnlab-consolidate, -report),
with the house's bad input: one line, ``error: ...``, exit status 2, not argparse's usage block."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors (a missing argument, an unknown option) are one line that
    points at ``--help``."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)
