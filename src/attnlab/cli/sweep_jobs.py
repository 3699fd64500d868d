"""The jobs of a multirun, known before the first one starts, so each can be validated up front.

A bad value in a sweep (``-m model.n_heads=4,3``) used to be found only when its job started, after
the jobs before it had trained. The basic sweeper's grid is known in full: its jobs are expanded as
the sweeper expands them (``BasicSweeper.split_arguments``). An Optuna search chooses its values as
it goes, so each value it could choose at the edges of its space is checked instead: every choice of
a ``choice(...)``/``range(...)``, both bounds of an ``interval(...)``. Each job's config is composed
as the sweeper composes it (``ConfigLoader.load_sweep_config``).
"""

from __future__ import annotations

from collections.abc import Iterator

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override
from omegaconf import DictConfig, OmegaConf


def sweep_overrides(config: DictConfig) -> list[Override]:
    """The multirun's overrides: the command line's, then the sweeper's ``params`` (``key: sweep``)."""
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    lines = [*config.hydra.overrides.task, *(f"{k}={v}" for k, v in params.items())]
    return OverridesParser.create().parse_overrides(lines)


def is_search(config: DictConfig) -> bool:
    """Whether the sweeper chooses its values as it goes (Optuna), rather than running a grid."""
    return "optuna" in str(OmegaConf.select(config, "hydra.sweeper._target_", default=""))


def sweep_jobs(config: DictConfig) -> Iterator[tuple[str, list[str]]]:
    """``(name, overrides)`` of each job to check: ``job <n> (<its swept values>)`` for a grid,
    ``<key>=<value> of the search space`` for each edge of a search."""
    overrides = sweep_overrides(config)
    fixed = [o.input_line for o in overrides if not o.is_sweep_override()]
    swept = [o for o in overrides if o.is_sweep_override()]
    if is_search(config):
        for override in swept:
            for value in edge_values(override):
                line = f"{override.get_key_element()}={value}"
                yield f"{line} of the search space", [*fixed, line]
        return
    keys = {o.get_key_element() for o in swept}
    for number, job in enumerate(BasicSweeper.split_arguments(overrides, None)[0]):
        named = " ".join(line for line in job if line.partition("=")[0] in keys)
        yield f"job {number} ({named})", job


def swept_keys(config: DictConfig) -> set[str]:
    """The keys the multirun varies (a grid's swept overrides, or a search's space)."""
    return {o.get_key_element().lstrip("+~") for o in sweep_overrides(config) if o.is_sweep_override()}


def edge_values(override: Override) -> list[str]:
    """Every value a discrete sweep holds; the two bounds of an interval."""
    value = override.value()
    if isinstance(value, IntervalSweep):
        return [str(value.start), str(value.end)]
    return list(override.sweep_string_iterator())


def compose_job(config: DictConfig, overrides: list[str]) -> DictConfig:
    """The config of the job with ``overrides``, composed as the multirun's sweeper composes it."""
    loader = GlobalHydra.instance().hydra.config_loader  # type: ignore[union-attr]
    return loader.load_sweep_config(config, overrides)
