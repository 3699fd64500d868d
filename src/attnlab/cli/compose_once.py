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
* A command whose overrides sweep (``pos=rope,alibi``) is a multirun or refused: ``get_mode`` composes
  its config as Hydra's does (multirun mode, sweeps not checked; any error swallowed) and keeps it
  for the multirun's composition, which differs only in checking the sweeps, done on the kept config's
  overrides as Hydra does before composing, and in the override ``hydra.mode=MULTIRUN`` that Hydra
  adds under ``-m`` where no config set the mode, applied last. A run of it composes as before (and
  fails), as does a multirun with no sweep (``-m`` alone) and any command whose overrides cannot be
  parsed.
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
MULTIRUN_MODE_OVERRIDE = "hydra.mode=MULTIRUN"  # what it adds under ``-m`` instead


@dataclass
class Composed:
    """What ``get_mode`` composed (a config, or the error composing it) for the composition that
    follows: that of ``loader``, ``config_name`` and ``overrides`` in ``run_mode``."""

    loader: ConfigLoaderImpl
    config_name: str | None
    overrides: list[str]
    result: DictConfig | Exception
    run_mode: RunMode = RunMode.RUN

    def is_for(
        self, loader: ConfigLoaderImpl, config_name: str | None, overrides: list[str], run_mode: RunMode
    ) -> bool:
        return (
            loader is self.loader
            and config_name == self.config_name
            and overrides == self.overrides
            and run_mode == self.run_mode
        )


composed: list[Composed] = []  # at most one, taken by the next composition


def compose_once() -> None:
    """Replace ``Hydra.get_mode`` and ``ConfigLoaderImpl.load_configuration`` (once per process)."""
    Hydra.get_mode = get_mode
    ConfigLoaderImpl.load_configuration = load_configuration


def get_mode(hydra: Hydra, config_name: str | None, overrides: list[str]) -> RunMode | None:
    """``hydra.mode`` as Hydra's ``get_mode`` reads it, from the config composed for the run, which is
    kept for ``Hydra.run``."""
    composed.clear()
    if has_sweeps(overrides):  # a multirun (-m) or the error of one without -m
        return multirun_mode(hydra, config_name, overrides)
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


def multirun_mode(hydra: Hydra, config_name: str | None, overrides: list[str]) -> RunMode | None:
    """``hydra.mode`` as Hydra's ``get_mode`` reads it (its composition, any error swallowed); the
    config is kept for the multirun's composition."""
    loader = hydra.config_loader
    try:
        config = HYDRA_LOAD_CONFIGURATION(
            loader, config_name, list(overrides), RunMode.MULTIRUN, validate_sweep_overrides=False
        )
    except Exception:
        return None
    composed.append(Composed(loader, config_name, list(overrides), config, RunMode.MULTIRUN))
    return config.hydra.mode


def kept_multirun(kept: Composed, overrides: list[str], from_shell: bool) -> DictConfig:
    """The multirun's config from the one ``get_mode`` composed for ``kept.overrides`` (``overrides``
    are those, or those and ``hydra.mode=MULTIRUN``): the sweeps checked as Hydra checks them before
    composing (its error if one is not legal), Hydra's override applied last."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    ConfigLoaderImpl.validate_sweep_overrides_legal(parsed, RunMode.MULTIRUN, from_shell)
    config = kept.result
    assert isinstance(config, DictConfig)
    if len(overrides) > len(kept.overrides):
        with_mode(config, MULTIRUN_MODE_OVERRIDE)
    return config


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
    with_mode(config, RUN_MODE_OVERRIDE)


def with_mode(config: DictConfig, override: str) -> None:
    """Apply ``override`` (``hydra.mode=...``) to a composed config as Hydra does, its last override."""
    ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides([override]), config)
    config.hydra.overrides.hydra.append(override)


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
    if kept is not None and is_the_run and kept.is_for(loader, config_name, overrides, run_mode):
        if isinstance(kept.result, Exception):
            raise kept.result
        return kept.result
    is_the_multirun = run_mode == RunMode.MULTIRUN and validate_sweep_overrides
    if (
        kept is not None
        and is_the_multirun
        and overrides[len(kept.overrides) :] in ([], [MULTIRUN_MODE_OVERRIDE])
        and kept.is_for(loader, config_name, overrides[: len(kept.overrides)], run_mode)
    ):
        return kept_multirun(kept, overrides, from_shell)
    return HYDRA_LOAD_CONFIGURATION(
        loader, config_name, overrides, run_mode, from_shell, validate_sweep_overrides
    )
