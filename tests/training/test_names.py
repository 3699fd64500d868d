"""A run's name: ``run_name=``, else the overrides that distinguish it (its sweep's, in a multirun)."""

from __future__ import annotations

import pytest

from attnlab.training.names import record_swept_keys, run_label, run_name


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
    assert run_name(None, ["pos=rope", "seed=3"], "0") == "seed=3"
