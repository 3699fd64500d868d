"""A multirun is validated job by job before its first job trains: a bad value of
a grid names its job and override; a search space whose edges are bad names the edge."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_cli import TEXT, TINY, command_here, run_command

GPT = [*TINY, *TEXT, "model=gpt-tiny", "sample.max_new_tokens=0", "logger=none"]


def test_a_bad_value_of_a_grid_stops_the_multirun_before_any_job(tmp_path: Path) -> None:
    result = command_here(["-m", "model.n_heads=4,3", *GPT], tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line == "error: job 1 (model.n_heads=3): model.d_model=32: must be divisible by model.n_heads=3"
    assert not (tmp_path / "multirun").exists()  # no job started, no directory made


def test_the_jobs_of_a_grid_are_named_by_their_swept_values(tmp_path: Path) -> None:
    result = command_here(
        ["-m", "model.n_heads=2,4", "model.n_layers=1,2", "optim.lr=0.01,-1", *GPT], tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert "error: job 1 (model.n_heads=2 model.n_layers=1 optim.lr=-1): optim.lr=-1" in result.stderr


def test_an_edge_of_a_search_space_out_of_bounds_stops_the_search(tmp_path: Path) -> None:
    space = "model.dropout=interval(0.0, 1.5)"  # on the command line, it replaces the preset's space
    result = command_here(["hparams_search=optuna", space, *GPT], tmp_path)
    assert result.returncode == 2, result.stderr
    assert "error: model.dropout=1.5 of the search space: model.dropout=1.5: " in result.stderr
    assert not (tmp_path / "multirun").exists()


def test_a_bad_choice_of_a_search_space_stops_the_search(tmp_path: Path) -> None:
    space = "optim.warmup_steps=choice(0, -5)"
    result = command_here(["hparams_search=optuna", space, *GPT], tmp_path)
    assert result.returncode == 2, result.stderr
    assert "error: optim.warmup_steps=-5 of the search space: optim.warmup_steps=-5: " in result.stderr


def test_a_non_finite_value_of_a_grid_stops_the_multirun_before_any_job(tmp_path: Path) -> None:
    """``optim.lr=1e-3,nan`` trained job 0 to completion before job 1 failed."""
    result = command_here(["-m", "optim.lr=1e-3,nan", *GPT], tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line == "error: job 1 (optim.lr=nan): optim.lr=nan: must be a finite number (not nan, inf or -inf)"
    assert not (tmp_path / "multirun").exists()


def test_the_jobs_checked_are_the_jobs_the_sweeper_runs() -> None:
    """A preset's swept ``params`` come first and the command line's value of a key replaces theirs,
    as the sweeper reads them: ``experiment=pos_extrapolation seed=1 pos=learned,rope`` checks its two
    jobs, not the preset's 18 (3 seeds x 6 encodings)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from attnlab.cli.hydra.hydra_shims import basic_sweeper
    from attnlab.cli.hydra.sweep_jobs import sweep_jobs, swept_keys

    task = ["experiment=pos_extrapolation", "seed=1", "pos=learned,rope"]
    params = {"seed": "1,2,3", "pos": "none,learned,rope,alibi"}
    config = OmegaConf.create({"hydra": {"overrides": {"task": task}, "sweeper": {"params": params}}})
    jobs = list(sweep_jobs(config))
    assert [name for name, _ in jobs] == ["job 0 (seed=1 pos=learned)", "job 1 (seed=1 pos=rope)"]
    # BasicSweeper.sweep's own order: its params, then the command line
    lines = [*(f"{key}={value}" for key, value in params.items()), *task]
    (run,) = basic_sweeper().split_arguments(OverridesParser.create().parse_overrides(lines), None)
    assert [overrides for _, overrides in jobs] == run
    assert swept_keys(config) == {"seed", "pos"}  # the job folders stay named by the preset's seeds too


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["-m", "hydra.job.chdir=true,false"],  # refused by the multirun's own composition
            "error: Sweeping over Hydra's configuration is not supported : 'hydra.job.chdir=true,false'",
        ),
        (["pos=rope,alibi"], "error: Ambiguous value for argument 'pos=rope,alibi'; "),  # a sweep without -m
    ],
)
def test_a_sweep_hydra_refuses_is_one_line_before_any_directory(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Hydra's own checks of a sweep, as one line."""
    from attnlab.cli.train import main

    monkeypatch.chdir(tmp_path)
    assert run_command(main, [*args, *GPT], monkeypatch, capsys) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(message)
    assert list(tmp_path.iterdir()) == []
