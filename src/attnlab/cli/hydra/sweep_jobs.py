"""The jobs of a multirun, known before the first one starts, so each can be validated up front.

A bad value in a sweep (``-m model.n_heads=4,3``) used to be found only when its job started, after
the jobs before it had trained. The basic sweeper's grid is known in full: its jobs are expanded as
the sweeper expands them (``grid_jobs``, the product of the swept values, each key at its last place). An Optuna search chooses its values as
it goes, so each value it could choose at the edges of its space is checked instead: every choice of
a ``choice(...)``/``range(...)``, both bounds of an ``interval(...)``. Each job's config is composed
as the sweeper composes it (``ConfigLoader.load_sweep_config``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override
from omegaconf import DictConfig, OmegaConf


def sweep_overrides(config: DictConfig) -> list[Override]:
    """The multirun's overrides in the order its sweeper reads them (the basic and the Optuna
    sweeper alike): the sweeper's ``params`` (``key: sweep``), then the command line's, whose value of
    a key replaces that of ``params`` (``experiment=pos_extrapolation seed=1`` runs one seed)."""
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    lines = [*(f"{k}={v}" for k, v in params.items()), *config.hydra.overrides.task]
    return OverridesParser.create().parse_overrides(lines)


SEED = "seed"


def seeds_first(overrides: list[Override]) -> list[Override]:
    """``overrides`` with those of the seed first (their order kept): the basic sweeper's grid varies its
    first key slowest, so the jobs run every configuration of one seed before the next seed
    (``hydra/sweeper=interleaved``)."""
    return sorted(overrides, key=lambda o: o.get_key_element().lstrip("+~") != SEED)


def is_interleaved(config: DictConfig) -> bool:
    """Whether the multirun's sweeper orders its grid seed by seed (``hydra/sweeper=interleaved``)."""
    return "InterleavedSweeper" in str(OmegaConf.select(config, "hydra.sweeper._target_", default=""))


def is_search(config: DictConfig) -> bool:
    """Whether the sweeper chooses its values as it goes (Optuna), rather than running a grid."""
    return "optuna" in str(OmegaConf.select(config, "hydra.sweeper._target_", default=""))


def sweep_jobs(config: DictConfig) -> Iterator[tuple[str, list[str]]]:
    """``(name, overrides)`` of each job to check: ``job <n> (<its swept values>)`` for a grid,
    ``<key>=<value> of the search space`` for each edge of a search."""
    overrides = sweep_overrides(config)
    fixed = [o.input_line for o in overrides if not o.is_sweep_override()]
    if is_search(config):
        last_of_each_key = {o.get_key_element(): o for o in overrides}.values()
        swept = [o for o in last_of_each_key if o.is_sweep_override()]
        for override in swept:
            for value in edge_values(override):
                line = f"{override.get_key_element()}={value}"
                yield f"{line} of the search space", [*fixed, line]
        return
    keys = {o.get_key_element() for o in overrides if o.is_sweep_override()}
    grid = seeds_first(overrides) if is_interleaved(config) else overrides  # in the order jobs run
    for number, job in enumerate(grid_jobs(grid)):
        named = " ".join(line for line in job if line.partition("=")[0] in keys)
        yield f"job {number} ({named})", job


def grid_jobs(overrides: list[Override]) -> list[list[str]]:
    """The overrides of each job of a grid, as Hydra's basic sweeper expands it: one ``key=value`` per
    key (a key given twice keeps its first place and its last value), the product of every sweep's
    values, the last key varying fastest. A sweep that is not a list of values (``interval(...)``) is
    refused, as the basic sweeper refuses it."""
    choices: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise ValueError(f"{override.input_line}: a grid sweeps lists of values, not intervals")
    return [list(job) for job in itertools.product(*choices.values())]


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
