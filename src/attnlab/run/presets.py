"""Where the Hydra configs are, and the presets each group of them offers."""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def config_dir() -> Path:
    """The Hydra configs, installed with attnlab as the package ``attnlab.conf`` (``conf/`` of the
    repository), so the commands find them from any directory and in any kind of install."""
    return Path(str(importlib.resources.files("attnlab.conf")))


def presets(group: str) -> list[str]:
    """The options of ``group`` that ``conf/<group>/`` holds (not the schemas of the config store)."""
    return sorted(path.stem for path in (config_dir() / group).glob("*.yaml"))
