"""A run's name: ``run_name=``, else the overrides that distinguish it (its sweep's, in a multirun);
the same label in its folder's name, in a form that shells, globs and Hydra overrides take as it is."""

from __future__ import annotations

import glob
import shlex

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from attnlab.training.names import (
    MAX_LENGTH,
    folder_name,
    record_implied_overrides,
    record_swept_keys,
    run_label,
    run_name,
)


def test_a_single_run_is_named_by_what_it_trains() -> None:
    overrides = ["model=gpt-tiny", "run_dir=/tmp/x", "logger=csv", "hydra.verbose=true", "pos=rope"]
    assert run_label(overrides) == "model=gpt-tiny,pos=rope"


def test_a_job_of_a_sweep_is_named_by_the_keys_the_sweep_varies() -> None:
    overrides = ["model=gpt-tiny", "model.n_heads=4", "+data.x=a/b c", "seed=3"]
    assert run_label(overrides, {"model.n_heads", "data.x"}) == "model.n_heads=4,+data.x=a-b-c"


def test_run_name_wins_then_the_label_then_the_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNLAB_SWEPT_KEYS", raising=False)
    assert run_name("mine", ["pos=rope"], "12-00-00") == "mine"
    assert run_name(None, ["pos=rope"], "12-00-00") == "pos=rope"
    assert run_name(None, ["run_dir=x"], "12-00-00") == "12-00-00"
    record_swept_keys({"seed"})
    assert run_name(None, ["pos=rope", "seed=3"], "0", multirun=True) == "seed=3"
    assert run_name(None, ["pos=rope", "seed=3"], "0") == "pos=rope,seed=3"  # a single run: not a sweep's


def test_a_folder_is_named_by_its_time_then_its_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNLAB_SWEPT_KEYS", raising=False)
    overrides = ["model.n_heads=4", "logger=csv", "pos=rope", "run_dir=x"]
    assert folder_name("12-00-00", None, overrides, multirun=False) == "12-00-00_model.n_heads-4+pos-rope"
    assert folder_name("12-00-00", "my run/1", overrides, multirun=False) == "12-00-00_my-run-1"
    assert folder_name("12-00-00", None, ["logger=csv"], multirun=False) == "12-00-00"  # the defaults' run


def test_a_job_folder_is_named_by_its_number_then_its_swept_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNLAB_SWEPT_KEYS", raising=False)
    record_swept_keys({"model.n_heads", "optim.betas"})
    job = ["model=gpt-tiny", "model.n_heads=2", "optim.betas=[0.9,0.95]"]
    assert folder_name("3", None, job, multirun=True) == "3_model.n_heads-2+optim.betas-0.9-0.95"
    assert folder_name("3", None, job, multirun=False).startswith("3_model-gpt-tiny+")  # not a sweep's


@pytest.mark.parametrize(
    "value", ["../data/a b.txt", "-1e-3", "[1,2]", "{a:1}", "'x,y'", "a=b", "${oc.env:HOME}", "*?|;&"]
)
def test_a_folder_name_needs_no_quoting_in_a_shell_a_glob_or_a_hydra_override(value: str) -> None:
    """``ckpt_path=<run>/last.ckpt`` and ``-m ckpt_path=<a>,<b>`` parse the path back unchanged."""
    name = folder_name("12-00-00", None, [f"data.path={value}"], multirun=False)
    assert name == shlex.quote(name) and not glob.has_magic(name) and len(name) <= 9 + MAX_LENGTH
    path = f"/runs/{name}/checkpoints/last.ckpt"
    parser = OverridesParser.create()
    assert parser.parse_override(f"ckpt_path={path}").value() == path
    assert list(parser.parse_override(f"ckpt_path={path},{path}").sweep_string_iterator()) == [path, path]


def test_a_folder_name_is_bounded() -> None:
    name = folder_name("0", None, [f"data.path={'x' * 500}"], multirun=False)
    assert name == "0_data.path-" + "x" * (MAX_LENGTH - len("data.path-"))


def test_overrides_a_command_implied_are_left_out_of_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """task=distill adds the teacher's defaults to the command line; a name holds only what was typed."""
    monkeypatch.delenv("ATTNLAB_SWEPT_KEYS", raising=False)
    monkeypatch.setenv("ATTNLAB_IMPLIED_OVERRIDES", "[]")  # restored after the test
    record_implied_overrides(["model=_teacher", "pos=learned", "task.objective=classification"])
    command = [
        "model=_teacher",
        "pos=learned",
        "task.objective=classification",
        "task=distill",
        "model.n_layers=2",
    ]
    assert run_label(command) == "task=distill,model.n_layers=2"
    assert folder_name("12-00-00", None, command, multirun=False) == "12-00-00_task-distill+model.n_layers-2"
    assert run_label(["pos=rope"]) == "pos=rope"  # typed, and not the implied value


def test_a_path_in_a_name_keeps_its_last_three_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """So that a long checkpoint path does not push out the overrides after it."""
    monkeypatch.delenv("ATTNLAB_SWEPT_KEYS", raising=False)
    overrides = ["task.teacher=/a/b/outputs/2026-01-01/12-00-00_vit/checkpoints/last.ckpt", "seed=2"]
    assert run_label(overrides) == "task.teacher=12-00-00_vit-checkpoints-last.ckpt,seed=2"
    name = folder_name("1", None, overrides, multirun=False)
    assert name == "1_task.teacher-12-00-00_vit-checkpoints-last.ckpt+seed-2"
