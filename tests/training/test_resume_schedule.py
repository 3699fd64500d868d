"""A resume whose step budget differs from its checkpoint's schedule says what happens to the learning
rate, and its summary records the schedule (an extended run trained at the floor of the
old cosine schedule without a word)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from attnlab.schema.optim import AdamWConfig, OnExtend
from attnlab.schema.run import RunConfig
from attnlab.training.resume import report_schedule

SAVED = {"name": "cosine", "warmup_steps": 10, "max_steps": 100, "min_lr_ratio": 0.1, "d_model": 32}


def resumed_to(max_steps: int, on_extend: OnExtend = OnExtend.keep, schedule: str = "cosine") -> RunConfig:
    run = RunConfig()
    optim = AdamWConfig(lr=1e-3, schedule=schedule, warmup_steps=10, on_extend=on_extend)
    return replace(run, optim=optim, trainer=replace(run.trainer, max_steps=max_steps))


def test_a_fresh_run_records_its_schedule_quietly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        assert report_schedule(resumed_to(300), {}) == {"name": "cosine", "steps": 300}
        state = {"schedule": SAVED, "global_step": 50}
        assert report_schedule(resumed_to(100), state) == {"name": "cosine", "steps": 100}  # same budget
    assert not caplog.records


def test_keep_past_the_end_of_the_schedule_warns_with_the_rate_and_the_choice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        record = report_schedule(resumed_to(150), {"schedule": SAVED, "global_step": 100})
    assert record == {"name": "cosine", "steps": 100, "checkpoint_steps": 100, "on_extend": "keep"}
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING
    message = warning.getMessage()
    assert "steps 101-150 keep its final learning rate 1.00e-04" in message
    assert "optim.on_extend=stretch" in message


def test_stretch_says_how_the_rate_changes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        record = report_schedule(resumed_to(190, OnExtend.stretch), {"schedule": SAVED, "global_step": 100})
    assert record == {"name": "cosine", "steps": 190, "checkpoint_steps": 100, "on_extend": "stretch"}
    (info,) = caplog.records
    assert info.levelno == logging.INFO
    # at step 100 of a 190-step cosine after 10 warm-up steps: halfway, 0.55 of the peak
    assert "at step 100 the learning rate goes from 1.00e-04 to 5.50e-04" in info.getMessage()


def test_schedules_without_a_budget_have_nothing_to_extend(caplog: pytest.LogCaptureFixture) -> None:
    saved = {**SAVED, "name": "constant"}
    with caplog.at_level(logging.INFO):
        record = report_schedule(
            resumed_to(150, schedule="constant"), {"schedule": saved, "global_step": 100}
        )
    assert record == {"name": "constant", "steps": 150}
    assert not caplog.records
