"""The places where attnlab's command line leans on Hydra's internals, in one place, and the version
they were checked against.

Two, both about what a user sees, neither about speed of the test suite:

* ``--help`` with each key described: Hydra's ``Hydra.get_help`` fills every placeholder of its help
  template, both lists of config groups included, whether the template shows them or not (listing
  them composes the config once per group: 23 s on a busy 2-core machine), and dumps the config
  bare. ``help_with_field_comments`` fills only the placeholders attnlab's templates use and annotates
  each key with its schema field's comment (``attnlab.cli.hydra.help.described_yaml``).
* A multirun's one line per job: Hydra's basic launcher logs ``#3 : pos=rope`` per job under its
  module's logger (``LAUNCHER_LOGGER``), which ``attnlab.cli.hydra.jobs`` filters because each job prints
  its own line when it ends.

Each depends on something Hydra does not promise; the contract tests (``tests/cli/test_hydra_shims.py``)
fail when that changes. Under a Hydra version other than ``CHECKED_HYDRA`` every shim is off: ``--help``
is Hydra's own (slow, keys undescribed) and the launcher's lines stay.
"""

from __future__ import annotations

import string
from argparse import ArgumentParser
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import hydra
from omegaconf import DictConfig

from attnlab.cli.hydra.help import described_yaml

CHECKED_HYDRA = (1, 3)  # the major and minor version whose internals the contract tests read


def hydra_checked(version: str = hydra.__version__) -> bool:
    """Whether ``version`` (Hydra's, by default) is the one the shims were checked against."""
    major, minor, *_ = (version.split("+")[0] + ".0.0").split(".")
    return (int(major), int(minor)) == CHECKED_HYDRA


SHIMS_ON = hydra_checked()

# -- --help: only the placeholders its template shows, each key described -----------------------


def get_help(
    hydra_app: Any, help_cfg: DictConfig, cfg: DictConfig, args_parser: ArgumentParser, resolve: bool
) -> str:
    """Hydra's ``Hydra.get_help``, computing only the placeholders that ``help_cfg.template`` uses, and
    with the application's config described (``described_yaml``)."""
    template = str(help_cfg.template)
    values = {"CONFIG": described_yaml(cfg, resolve)}
    if "$FLAGS_HELP" in template:
        values["FLAGS_HELP"] = hydra_app.format_args_help(args_parser)
    for name, wanted in (("HYDRA_CONFIG_GROUPS", True), ("APP_CONFIG_GROUPS", False)):
        if f"${name}" in template:
            values[name] = hydra_app.format_config_groups(
                lambda g, w=wanted: (g == "hydra" or g.startswith("hydra/")) == w
            )
    return string.Template(template).substitute(values)


@contextmanager
def help_with_field_comments() -> Iterator[None]:
    """Within: Hydra's ``--help`` is ``get_help``'s (Hydra's own outside the checked version); Hydra's
    own again after."""
    if not SHIMS_ON:
        yield
        return
    from hydra._internal.hydra import Hydra

    hydras = Hydra.__dict__["get_help"]
    Hydra.get_help = get_help
    try:
        yield
    finally:
        Hydra.get_help = hydras


# -- a multirun's launch lines ----------------------------------------------------------------

LAUNCHER_LOGGER = "hydra._internal.core_plugins.basic_launcher"  # its module's name


def launcher_logger() -> str | None:
    """The logger Hydra's basic launcher writes its ``\t#<n> : <overrides>`` line per job to; None
    outside the checked version."""
    return LAUNCHER_LOGGER if SHIMS_ON else None


# -- the interleaved sweeper's base: Hydra's grid sweeper, which it exports under no public name -----


def basic_sweeper() -> type:
    """Hydra's ``BasicSweeper`` (a grid, run in order), the class ``hydra/sweeper=basic`` names: the base
    of ``hydra/sweeper=interleaved``, which only reorders its grid (``hydra_plugins.attnlab_sweeper``).
    Its ``split_arguments`` is the contract (tests/cli/test_hydra_shims.py)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper
