"""The report's files written whole: each through a temporary file of this process's own beside it
(``<name>.<random>.tmp``, created here, never a link or another report's), then one rename. Two
reports of one sweep at once each write whole files; the last to finish leaves its own."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_whole(path: Path, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` into a new temporary file beside ``path``, then renamed over ``path``; the
    temporary file is removed if ``write`` fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~umask())  # mkstemp's is 0600: the mode any new file gets instead
    os.close(fd)
    try:
        write(Path(name))
        os.replace(name, path)
    finally:
        Path(name).unlink(missing_ok=True)
    return path


def write_text_whole(path: Path, text: str) -> Path:
    """``text`` as ``path``, written whole."""
    return write_whole(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def umask() -> int:
    """This process's file-creation mask (read by setting it, then set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
