"""The places where the command line leans on Hydra's internals (``cli.hydra.hydra_shims``): one contract per
shim, which fails when the internal it relies on changes, and the version guard that turns them off."""

from __future__ import annotations

import inspect
import logging

import hydra
import pytest
from hydra._internal.core_plugins import basic_launcher
from hydra._internal.hydra import Hydra
from test_help import help_text

from attnlab.cli.hydra import hydra_shims
from attnlab.cli.hydra.hydra_shims import CHECKED_HYDRA, get_help, help_with_field_comments, hydra_checked

# -- the version guard ----------------------------------------------------------------------


def test_the_installed_hydra_is_the_one_the_shims_were_checked_against() -> None:
    """Fails after an upgrade: re-read the contracts below, then move ``CHECKED_HYDRA``."""
    assert hydra_checked(), (hydra.__version__, CHECKED_HYDRA)
    assert hydra_shims.SHIMS_ON


@pytest.mark.parametrize(
    ("version", "checked"),
    [
        ("1.3.2", True),
        ("1.3.8", True),
        ("1.3", True),
        ("1.4.0.dev1", False),
        ("1.2.0", False),
        ("2.3.0", False),
    ],
)
def test_only_the_checked_minor_version_switches_the_shims_on(version: str, checked: bool) -> None:
    assert hydra_checked(version) is checked


def test_outside_the_checked_version_every_shim_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hydra_shims, "SHIMS_ON", False)
    hydras = Hydra.__dict__["get_help"]
    with help_with_field_comments():
        assert Hydra.__dict__["get_help"] is hydras
    assert hydra_shims.launcher_logger() is None


# -- --help ----------------------------------------------------------------------------------


def test_hydra_builds_its_help_text_with_get_help_and_these_arguments() -> None:
    """``Hydra.app_help`` (``--help``) prints what ``self.get_help(help_cfg, cfg, args_parser, resolve=)``
    returns, and the two placeholders' makers take what ``get_help`` gives them."""
    assert "self.get_help(" in inspect.getsource(Hydra.app_help)
    ours = list(inspect.signature(get_help).parameters)[1:]
    assert list(inspect.signature(Hydra.get_help).parameters) == ["self", *ours]
    assert list(inspect.signature(Hydra.format_args_help).parameters) == ["args_parser"]
    assert list(inspect.signature(Hydra.format_config_groups).parameters)[:2] == ["self", "predicate"]


def test_within_the_shim_hydras_help_is_attnlabs_and_hydras_again_after() -> None:
    hydras = Hydra.__dict__["get_help"]
    with pytest.raises(RuntimeError), help_with_field_comments():
        assert Hydra.get_help is get_help
        raise RuntimeError  # a command that fails restores it too
    assert Hydra.__dict__["get_help"] is hydras


def test_help_does_not_list_hydras_config_groups(monkeypatch, capsys, tmp_path) -> None:
    """Hydra's own help fills its config-group lists whether its template shows them or not, composing
    the config once per group: 23 s on a busy 2-core machine; attnlab's templates list
    their groups themselves (a contract of ``get_help``: Hydra's ``format_config_groups`` is never called)."""

    def refused(*args: object, **kwargs: object) -> str:
        raise AssertionError("--help listed Hydra's config groups")

    monkeypatch.setattr(Hydra, "format_config_groups", refused)
    for command in ("train", "eval", "sample"):
        groups, _ = help_text(command, monkeypatch, capsys, tmp_path)
        assert "Compose your configuration" in groups


# -- a multirun's launch lines --------------------------------------------------------------


def test_the_basic_launcher_logs_each_jobs_line_to_the_logger_the_shim_names(caplog) -> None:
    assert basic_launcher.log.name == hydra_shims.launcher_logger()
    assert 'log.info(f"\\t#{idx} : {lst}")' in inspect.getsource(basic_launcher)  # DropJobLaunchLines' prefix
    from attnlab.cli.hydra.jobs import DropJobLaunchLines

    line = logging.LogRecord(basic_launcher.log.name, logging.INFO, "", 0, "\t#3 : pos=rope", None, None)
    assert not DropJobLaunchLines().filter(line)


# -- the interleaved sweeper's base -----------------------------------------------------------


def test_the_basic_sweeper_splits_a_grid_into_its_product_in_order() -> None:
    """``hydra/sweeper=interleaved`` reorders the overrides it hands the basic sweeper's
    ``split_arguments``, which must expand them into their product, the last key varied fastest."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = OverridesParser.create().parse_overrides(["pos=rope,alibi", "seed=1,2"])
    (batch,) = hydra_shims.basic_sweeper().split_arguments(overrides, None)
    assert batch == [
        ["pos=rope", "seed=1"],
        ["pos=rope", "seed=2"],
        ["pos=alibi", "seed=1"],
        ["pos=alibi", "seed=2"],
    ]
