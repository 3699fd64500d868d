"""The run's signal policy (``training.signals``), its handler called directly: deferred while the training
loop runs, at once in every other phase, and at once on a second signal."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from attnlab.training.signals import RunInterrupted, SignalPolicy


def test_outside_the_loop_a_signal_interrupts_at_once_naming_the_phase() -> None:
    policy = SignalPolicy()
    policy.phase = "test"
    with pytest.raises(RunInterrupted, match=r"^SIGTERM during test$") as stop:
        policy.handle(signal.SIGTERM, None)
    assert (stop.value.exit_code, stop.value.phase, stop.value.path) == (143, "test", None)


def test_in_the_loop_a_signal_waits_for_the_step_and_a_second_one_does_not() -> None:
    policy = SignalPolicy()
    policy.defer("fit")
    policy.handle(signal.SIGINT, None)  # noted: the loop stops at the end of its step
    assert policy.received == signal.SIGINT
    with pytest.raises(RunInterrupted, match=r"^SIGINT during fit$") as stop:
        policy.handle(signal.SIGTERM, None)  # the first signal names the stop
    assert stop.value.exit_code == 130 and policy.stopping


def test_a_signal_noted_as_the_loop_ends_stops_the_run_once_the_state_is_saved() -> None:
    """Item 4: after the last validation, a SIGTERM was swallowed and the run went on to test and sample."""
    policy = SignalPolicy()
    policy.end_deferral(6, Path("last.ckpt"))  # nothing noted: the run goes on
    policy.defer("fit")
    policy.handle(signal.SIGTERM, None)
    with pytest.raises(RunInterrupted, match=r"^SIGTERM at step 6 during fit: saved last.ckpt$"):
        policy.end_deferral(6, Path("last.ckpt"))
    assert not policy.deferred
