"""One signal policy for the whole run: SIGINT or SIGTERM in any phase (start-up,
Lightning's setup, after the last validation, the final test, the sample) ends the run at once with
exit 130 / 143, ``summary.json`` ``interrupted`` with the phase, the resume command printed and no
traceback; that command then finishes the run as an uninterrupted one finishes it.

Every run is in this process (``command_here``): the signal is sent by ``os.kill`` to this process from
the phase (fault_injection.SignalInPhase), the handler the run installed raises, and its exit status
comes back as SystemExit, as for the other commands (test_command_signal_phases.py). A real interpreter ended with a signal's status: SIGTERM in
test_train_interrupts.py; signals from another process: test_command_process_faults.py."""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path

import pytest
from in_process import restored
from train_cli import TEXT, TINY, check, command_here, csv_series

pytestmark = pytest.mark.slow
ARGS = [*TINY, *TEXT, "model=gpt-tiny", "model.dropout=0.1", "logger=csv", "sample.max_new_tokens=8"]


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run, trained in this process."""
    cwd = tmp_path_factory.mktemp("signal_phases")
    with restored():
        check(command_here([*ARGS, "run_dir=full"], cwd))
    return cwd / "full"


def test_metrics(run_dir: Path) -> dict[str, float]:
    return json.loads((run_dir / "test_metrics.json").read_text())["metrics"]


test_metrics.__test__ = False  # a helper, not a test


@pytest.mark.parametrize(
    ("phase", "name", "summary_phase"),
    [
        ("start-up", "SIGINT", "start-up"),
        ("setup", "SIGTERM", "start-up"),
        ("after-fit", "SIGTERM", "fit"),
        ("test", "SIGINT", "test"),
        ("sampling", "SIGTERM", "sampling"),
    ],
)
def test_a_signal_in_any_phase_ends_the_run_with_its_status_and_an_exact_resume(
    full: Path, phase: str, name: str, summary_phase: str
) -> None:
    cwd, run_dir = full.parent, full.parent / f"{phase}-{name}"
    stop = f"+callbacks.stop={{_target_:fault_injection.SignalInPhase,phase:{phase},signal:{name}}}"
    with restored():  # the policy's handlers, the replaced generate and the signal's own state put back
        stopped = command_here([*ARGS, f"run_dir={run_dir.name}", stop], cwd)
    assert stopped.returncode == 128 + getattr(signal, name), stopped.stderr
    assert "Traceback" not in stopped.stderr, stopped.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["phase"]) == ("interrupted", summary_phase)
    assert summary["error"].startswith(name) and f" during {summary_phase}" in summary["error"]
    assert f"interrupted by {summary['error']}\n" in stopped.stderr

    command = stopped.stderr.split("resume with: ", 1)[1].splitlines()[0]
    program, *args = shlex.split(command)
    assert program == "attnlab-train" and f"run_dir={run_dir}" in args
    with restored():  # the resume, in this process
        check(command_here([a for a in args if not a.startswith("+callbacks.")], cwd))
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    assert test_metrics(run_dir) == test_metrics(full)
    losses = csv_series(run_dir / "csv", "train/loss")
    for resumed in sorted((run_dir / "csv").glob("resumed-*")):
        losses |= csv_series(resumed, "train/loss")
    assert losses == csv_series(full, "train/loss")
