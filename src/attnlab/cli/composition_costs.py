"""Three costs of Hydra's composition that buy nothing, removed (``run_hydra`` applies them):

* ``share_the_config_store``: every composition deep-copied the whole config store, every schema node.
* ``parse_each_config_file_once``: Hydra parses every file of the defaults tree (PyYAML, in Python) at
  every composition, and a multirun composes once per job; a file is parsed once per process here,
  known by its device, inode, size and modification time, so an edited file is parsed again.
* ``interpolation_map_only_when_needed``: at every node of the defaults tree Hydra builds an OmegaConf
  config of every group choice made so far, which only an interpolated default (``- db: ${other}``)
  reads; attnlab's configs have none, so it was built about 30 times per composition for nothing.

The last two together are a quarter of a composition (75 -> 57 CPU-ms for ``model=gpt-tiny pos=rope``,
measured on the machine of 2026-11-28).
"""

from __future__ import annotations

import copy
import os
from typing import IO, Any

import yaml
from hydra._internal import defaults_list
from hydra._internal.core_plugins import file_config_source, importlib_resources_config_source
from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf._utils import get_yaml_loader

HYDRA_INTERPOLATION_MAP = defaults_list._create_interpolation_map

# (device, inode, size, modification time in ns) of a config file -> what PyYAML made of it
PARSED: dict[tuple[int, int, int, int], Any] = {}


class OmegaConfParsingEachFileOnce(OmegaConf):
    """OmegaConf as Hydra's config sources call it (``OmegaConf.load`` of an open config file)."""

    @staticmethod
    def load(file_: IO[Any]) -> DictConfig | ListConfig:  # type: ignore[override]
        """``OmegaConf.load``'s config, from the file's parse of this process where it has one."""
        try:
            stat = os.fstat(file_.fileno())
        except (AttributeError, OSError, ValueError):  # not a file of its own (a zip's member)
            return OmegaConf.load(file_)
        key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key not in PARSED:
            PARSED[key] = yaml.load(file_, Loader=get_yaml_loader())
        parsed = copy.deepcopy(PARSED[key])  # plain data: a copy is cheap, and no caller shares it
        if parsed is None:
            return OmegaConf.create()
        if not isinstance(parsed, (list, dict, str)):
            raise OSError(f"Invalid loaded object type: {type(parsed).__name__}")  # as OmegaConf.load
        return OmegaConf.create(parsed)


def share_the_config_store() -> None:
    """Make Hydra's copies of its config repository share the config store instead of copying it.

    Every composition deep-copies the repository (Hydra's ``CachingConfigRepository``, so that
    re-initialising the copy's sources leaves the original's alone), and with it the whole config store,
    every node of every command's schema. The store is a process-wide singleton that a structured
    source takes again when it is re-initialised (``ConfigStore.instance()``) and that hands out only
    copies of its nodes (``ConfigStore.load``), so its copy protects nothing: a fifth of the Python calls
    of a command refused by validation."""
    ConfigStore.__deepcopy__ = lambda store, memo: store


def parse_each_config_file_once() -> None:
    """Make Hydra's file and package config sources read their files through ``PARSED``.

    Hydra's first use in a process scans its plugins (``Plugins.instance()``), executing the modules of
    its config sources again, which would put their own ``OmegaConf`` back: the scan is done first."""
    Plugins.instance()
    file_config_source.OmegaConf = OmegaConfParsingEachFileOnce
    importlib_resources_config_source.OmegaConf = OmegaConfParsingEachFileOnce


def interpolation_map_when_needed(overrides: Any, defaults: list[Any], self_added: bool) -> DictConfig | None:
    """Hydra's map of the group choices known so far, where one of ``defaults`` is an interpolation
    (its only reader, ``_create_defaults_tree_impl``, reads it for those alone); None otherwise."""
    if not any(default.is_interpolation() for default in defaults):
        return None
    return HYDRA_INTERPOLATION_MAP(overrides, defaults, self_added)


def interpolation_map_only_when_needed() -> None:
    defaults_list._create_interpolation_map = interpolation_map_when_needed
