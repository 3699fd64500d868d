"""A command's config composed once, not twice.

Hydra 1.3 composes the whole config twice per command: once to read ``hydra.mode``
(``Hydra.get_mode``: in multirun mode, without checking the sweeps, any error swallowed), then again
for the run (``Hydra.run``, with ``hydra.mode=RUN`` added to the overrides where no config set the
mode). Composing is most of what a command does before its job starts: 0.17 CPU-s of the 0.5 that a
command refused by validation takes, measured on a 2-core Xeon.

``compose_once`` makes ``get_mode`` compose the config as the run will (run mode, sweeps checked),
read the mode from it, and keep it for the run's own composition, which then takes it instead of
composing again:

* Where the run composition succeeds, it holds the ``hydra.mode`` that ``get_mode``'s would: the two
  differ only in checking the sweeps (which changes nothing it returns) and in skipping config groups
  left ``???``, which the run composition refuses (so, having succeeded, it had none). Where no config
  set the mode, the override ``hydra.mode=RUN`` that Hydra then adds is applied to it as Hydra applies
  overrides, last.
* Where it fails, the mode is Hydra's own ``get_mode`` (the search of a config that sets
  ``hydra.mode=MULTIRUN``, ``experiment=pos_sweep``, may succeed where a run does not), and a run
  fails with the same error without composing again: the one override it adds, ``hydra.mode=RUN``,
  is applied after everything else, so nothing that failed without it would have passed with it.
* A multirun (``-m``, or a config's ``hydra.mode=MULTIRUN``) composes as before; so does any command
  whose overrides sweep (or cannot be parsed), which a run composition would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.hydra import Hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig

HYDRA_GET_MODE = Hydra.get_mode
HYDRA_LOAD_CONFIGURATION = ConfigLoaderImpl.load_configuration
RUN_MODE_OVERRIDE = "hydra.mode=RUN"  # what Hydra's ``_run_app`` adds where no config set the mode


@dataclass
class Composed:
    """What ``get_mode`` composed (a config, or the error composing it) for the run composition that
    follows: that of ``loader``, ``config_name`` and ``overrides`` in run mode."""

    loader: ConfigLoaderImpl
    config_name: str | None
    overrides: list[str]
    result: DictConfig | Exception

    def is_for(self, loader: ConfigLoaderImpl, config_name: str | None, overrides: list[str]) -> bool:
        return loader is self.loader and config_name == self.config_name and overrides == self.overrides


composed: list[Composed] = []  # at most one, taken by the next composition


def compose_once() -> None:
    """Replace ``Hydra.get_mode`` and ``ConfigLoaderImpl.load_configuration`` (once per process)."""
    Hydra.get_mode = get_mode
    ConfigLoaderImpl.load_configuration = load_configuration


def get_mode(hydra: Hydra, config_name: str | None, overrides: list[str]) -> RunMode | None:
    """``hydra.mode`` as Hydra's ``get_mode`` reads it, from the config composed for the run, which is
    kept for ``Hydra.run``."""
    composed.clear()
    if has_sweeps(overrides):  # a multirun (-m) or the error of one without -m: Hydra's own way
        return HYDRA_GET_MODE(hydra, config_name, overrides)
    loader = hydra.config_loader
    try:
        config = HYDRA_LOAD_CONFIGURATION(loader, config_name, list(overrides), RunMode.RUN)
    except Exception as err:  # Hydra's get_mode swallows any error too
        mode = HYDRA_GET_MODE(hydra, config_name, overrides)
        if mode != RunMode.MULTIRUN:
            composed.append(Composed(loader, config_name, run_overrides(overrides, mode), err))
        return mode
    mode = config.hydra.mode
    if mode is None:
        with_run_mode(config)
    if mode != RunMode.MULTIRUN:
        composed.append(Composed(loader, config_name, run_overrides(overrides, mode), config))
    return mode


def has_sweeps(overrides: list[str]) -> bool:
    """Whether an override sweeps (``pos=rope,alibi``), which a run composition refuses; also where one
    cannot be parsed (Hydra says why)."""
    try:
        return any(o.is_sweep_override() for o in OverridesParser.create().parse_overrides(overrides))
    except Exception:
        return True


def run_overrides(overrides: list[str], mode: RunMode | None) -> list[str]:
    """The overrides that ``Hydra.run`` composes with, after ``get_mode`` read ``mode``."""
    return [*overrides, RUN_MODE_OVERRIDE] if mode is None else list(overrides)


def with_run_mode(config: DictConfig) -> None:
    """Apply ``hydra.mode=RUN`` to a composed config as Hydra does, its last override."""
    ConfigLoaderImpl._apply_overrides_to_config(
        OverridesParser.create().parse_overrides([RUN_MODE_OVERRIDE]), config
    )
    config.hydra.overrides.hydra.append(RUN_MODE_OVERRIDE)


def load_configuration(
    loader: ConfigLoaderImpl,
    config_name: str | None,
    overrides: list[str],
    run_mode: RunMode,
    from_shell: bool = True,
    validate_sweep_overrides: bool = True,
) -> Any:
    """Hydra's ``load_configuration``; the run composition that ``get_mode`` made already, if this is it."""
    kept = composed.pop() if composed else None
    is_the_run = run_mode == RunMode.RUN and from_shell and validate_sweep_overrides
    if kept is not None and is_the_run and kept.is_for(loader, config_name, overrides):
        if isinstance(kept.result, Exception):
            raise kept.result
        return kept.result
    return HYDRA_LOAD_CONFIGURATION(
        loader, config_name, overrides, run_mode, from_shell, validate_sweep_overrides
    )
