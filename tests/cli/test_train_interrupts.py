"""SIGINT (Ctrl-C), SIGTERM (a scheduler's pre-emption) and SIGHUP (the terminal closed) stop a run at the
current optimizer step with a checkpoint of that step, exit 130 / 143 / 129 with the summary
``interrupted`` and print the command that resumes it; that command continues exactly (per-step losses
and validations equal an uninterrupted run's).

SIGTERM's run is a process (the signal delivered by the kernel, its exit status the interpreter's);
SIGINT's and SIGHUP's run in this process, as every other run and resume here (``command_here``): the
run's handler raises and its exit status comes back as SystemExit."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from in_process import restored
from train_cli import TEXT, TINY, check, cli, command_here, csv_series

pytestmark = pytest.mark.slow
STEPS = 6
ARGS = [
    *TINY,
    *TEXT,
    "model=gpt-tiny",
    "model.dropout=0.1",
    "logger=csv",
    f"trainer.max_steps={STEPS}",
    "trainer.val_every_n_steps=3",
    "checkpoint.every_n_steps=100",  # only the signal writes a checkpoint before the end
    "test_after_fit=false",
    "sample.max_new_tokens=0",
]


def last_path(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / "last.ckpt"


def stopped_run(args: list[str], cwd: Path, in_a_process: bool) -> subprocess.CompletedProcess:
    """The run that a signal stops: a new interpreter, or in this process (what it replaced put back)."""
    if in_a_process:
        return cli(args, cwd)
    with restored():
        return command_here(args, cwd)


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run, trained in this process."""
    cwd = tmp_path_factory.mktemp("interrupts")
    with restored():
        check(command_here([*ARGS, "run_dir=full"], cwd))
    return cwd / "full"


@pytest.mark.parametrize(
    ("name", "step"),  # step 3 validates
    [
        pytest.param("SIGTERM", 2, marks=pytest.mark.process_contract("signals")),
        ("SIGINT", 3),
        ("SIGHUP", 4),
    ],
)
def test_a_signal_saves_the_step_and_prints_an_exact_resume_command(full: Path, name: str, step: int) -> None:
    cwd, run_dir = full.parent, full.parent / name
    stop = f"+callbacks.stop={{_target_:fault_injection.SignalAtStep,step:{step},signal:{name}}}"
    stopped = stopped_run([*ARGS, f"run_dir={run_dir.name}", stop], cwd, in_a_process=name == "SIGTERM")
    assert stopped.returncode == 128 + getattr(signal, name), stopped.stderr
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == step
    assert "Traceback" not in stopped.stderr, stopped.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["error"]) == (
        "interrupted",
        f"{name} at step {step} during fit: saved {last_path(run_dir)}",
    )
    command = stopped.stderr.split("resume with: ", 1)[1].splitlines()[0]
    program, *args = shlex.split(command)
    assert program == "attnlab-train" and f"run_dir={run_dir}" in args and "ckpt_path=last" in args
    with restored():  # the resume, in this process
        check(command_here([a for a in args if not a.startswith("+callbacks.")], cwd))

    before, after = run_dir / "csv", run_dir / "csv" / "resumed-1"
    losses = csv_series(before, "train/loss") | csv_series(after, "train/loss")
    assert sorted(csv_series(after, "train/loss")) == list(range(step, STEPS))
    assert losses == csv_series(full, "train/loss")  # bit for bit
    assert csv_series(before, "val/loss") | csv_series(after, "val/loss") == csv_series(full, "val/loss")
