"""attnlab-sample, -export, -explain and -compress answer SIGINT, SIGTERM and SIGHUP in every phase as
training does (docs/fault-tolerance.md, Signals): the status a shell gives a process ended by the signal
(130, 143, 129), one line ``interrupted by SIG... during <command>``, no traceback, and nothing of their
output left (no folder, no file, no temporary).

Each command runs in this process (its ``main``, as its console script runs it). The signal is sent by
``os.kill`` to this process from the function the phase calls, wrapped for the test: the handler the
command installed raises, and its exit status comes back as SystemExit. Phases: start-up (the command
line read into its schema), loading the checkpoint, the work, and writing the output (a signal inside
torch's zip writer included). tests/cli/test_command_signals_outside.py sends signals from another
process to real ones.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from train_cli import command_here, shared_tiny_checkpoints

pytestmark = pytest.mark.slow  # one tiny training run (shared), then each command in this process

RUNS = {"gpt": ["model=gpt-tiny", "data.seq_len=16", "data.batch_size=4"]}
COMMON = [
    "trainer.max_steps=2",
    "logger=none",
    "trainer.enable_progress_bar=false",
    "test_after_fit=false",
    "sample.max_new_tokens=0",
    "trainer.val_every_n_steps=2",
    "trainer.limit_val_batches=1",
]


@pytest.fixture(scope="module")
def checkpoint(built_once: Callable[..., Path]) -> Path:
    """The last.ckpt of a tiny GPT run, trained once per session (no command here writes beside it)."""
    return shared_tiny_checkpoints(built_once, "command_signal_phases", RUNS, COMMON)("gpt")


def args_of(command: str, checkpoint: Path, cwd: Path) -> list[str]:
    """A command line of ``command`` that writes (if anything) into ``cwd``."""
    ckpt = f"ckpt_path={checkpoint}"
    return {
        "sample": [ckpt, "prompt=To be", "max_new_tokens=4"],
        "export": [ckpt, f"out={cwd / 'exported'}"],
        "explain": [ckpt, "input=To be", f"out_dir={cwd / 'explained'}", "head_importance=false"],
        "compress": [ckpt, "method=int8", f"out={cwd / 'small.ckpt'}"],
    }[command]


class SignalledFile:
    """A file whose third write sends ``signum`` to this process: a signal landing inside torch's zip
    writer, which calls ``write`` from C++ and, past its first write, turns what a write raised into
    ``RuntimeError: ... unexpected pos`` (the traceback users saw), unless attnlab raises it itself."""

    def __init__(self, file: Any, signum: int) -> None:
        self.file, self.signum, self.writes = file, signum, 0

    def write(self, data: bytes) -> int:
        self.writes += 1
        if self.writes == 3:
            os.kill(os.getpid(), self.signum)
        return self.file.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)

    def __enter__(self) -> SignalledFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def signal_at(monkeypatch: pytest.MonkeyPatch, where: str, signum: int) -> None:
    """Send ``signum`` to this process when the command calls ``where`` (``module:function``,
    ``module:DICT[key]``, or ``writes`` for the first write of torch's zip writer)."""
    import importlib

    if where == "writes":
        import attnlab.training.files as files

        def signalled_open(*args: Any, **kwargs: Any) -> SignalledFile:
            return SignalledFile(open(*args, **kwargs), signum)  # closed by the with block it opens

        monkeypatch.setattr(files, "open", signalled_open, raising=False)
        return
    module_name, _, name = where.partition(":")
    module = importlib.import_module(module_name)
    owner, key = (module, name)
    if "[" in name:
        table, key = name.rstrip("]").split("[")
        owner = getattr(module, table)
    original = owner[key] if isinstance(owner, dict) else getattr(owner, key, print)

    def signalled(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signum)
        return original(*args, **kwargs)

    if isinstance(owner, dict):
        monkeypatch.setitem(owner, key, signalled)
    else:
        monkeypatch.setattr(owner, key, signalled, raising=False)


# (command, phase, the call the signal is sent at, signal): each command's phases, each signal in turn
CASES = [
    ("sample", "start-up", "attnlab.cli.sample:to_object", "SIGINT"),
    ("sample", "loading the checkpoint", "attnlab.checkpoint:load_checkpoint", "SIGTERM"),
    ("sample", "the work", "attnlab.run.families:generate", "SIGHUP"),
    ("sample", "writing the output", "attnlab.cli.sample:print", "SIGINT"),
    ("export", "start-up", "attnlab.cli.export:to_object", "SIGTERM"),
    ("export", "loading the checkpoint", "attnlab.checkpoint:load_checkpoint", "SIGHUP"),
    ("export", "the work", "attnlab.export.hf:export_checkpoint", "SIGINT"),
    ("export", "writing the output", "attnlab.export.hf:load_checked", "SIGTERM"),
    ("export", "publishing the output", "attnlab.export.hf:publish", "SIGHUP"),
    ("explain", "start-up", "attnlab.cli.explain:to_object", "SIGINT"),
    ("explain", "loading the checkpoint", "attnlab.checkpoint:load_checkpoint", "SIGTERM"),
    ("explain", "the work", "attnlab.explain.pipeline:attention_rollout", "SIGHUP"),
    ("explain", "writing the output", "attnlab.explain.pipeline:write_attention_maps", "SIGINT"),
    ("compress", "start-up", "attnlab.cli.compress:to_object", "SIGHUP"),
    ("compress", "loading the checkpoint", "attnlab.checkpoint:load_task_from_checkpoint", "SIGINT"),
    ("compress", "the work", "attnlab.compress:QUANTIZERS[int8]", "SIGTERM"),
    ("compress", "writing the output", "writes", "SIGHUP"),
]


@pytest.mark.parametrize(("command", "phase", "where", "name"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_signal_in_any_phase_ends_the_command_in_one_line_with_nothing_written(
    checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    phase: str,
    where: str,
    name: str,
) -> None:
    signum = getattr(signal, name)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    beside = sorted(checkpoint.parent.iterdir())
    signal_at(monkeypatch, where, signum)

    result = command_here(args_of(command, checkpoint, tmp_path), tmp_path, monkeypatch, capsys, command)

    assert result.returncode == 128 + signum, result.stderr
    assert result.stderr.splitlines() == [f"interrupted by {name} during {command}"], result.stderr
    assert sorted(tmp_path.iterdir()) == [], f"{phase}: left {sorted(tmp_path.rglob('*'))}"
    assert sorted(checkpoint.parent.iterdir()) == beside
    # the process's own handlers are back (pytest's SIGINT included)
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def test_the_command_after_an_interrupted_one_runs(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A signal answered in one command of a process leaves none pending for the next: a second
    interrupted command is answered in one line too (not ended at once as a second signal would be),
    and a command without a signal completes."""
    for where in ("attnlab.cli.sample:to_object", "attnlab.checkpoint:load_checkpoint"):
        with pytest.MonkeyPatch.context() as patch:
            signal_at(patch, where, signal.SIGTERM)
            result = command_here(args_of("sample", checkpoint, tmp_path), tmp_path, patch, capsys, "sample")
        assert (result.returncode, result.stderr) == (143, "interrupted by SIGTERM during sample\n")
    result = command_here(args_of("sample", checkpoint, tmp_path), tmp_path, monkeypatch, capsys, "sample")
    assert result.returncode == 0 and result.stdout.strip(), result.stderr
