"""Every command answers a signal as training does, and a full disk in one line naming the file: a process
contract, so each case is a real process. The signal is sent by the command to itself at a chosen call
(the function named is wrapped before ``main`` runs), so that it lands in the command's work, after start-up,
on every machine.

Covered: attnlab-eval (SIGTERM while validating its config), attnlab-report (SIGINT while reading the
runs), attnlab-consolidate (SIGHUP while looking at the checkpoint); training's SIGHUP is in
test_train_interrupts. The other commands (sample, export, explain, compress) share eval's path
(``cli.hydra.app.run_hydra``). A file size limit (``ulimit -f``) during training: one line naming the file.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from train_cli import HERE, TEXT, TINY, cli_env

import processes

pytestmark = pytest.mark.slow
SRC = Path(__file__).resolve().parents[2] / "src"

SIGNAL_AT_CALL = """
import os, signal, sys
import {module} as target
original = target.{function}
def signalled(*args, **kwargs):
    os.kill(os.getpid(), signal.{name})
    return original(*args, **kwargs)
target.{function} = signalled
sys.argv = {argv!r}
from {module} import main
main()
"""


def run_python(code: str, cwd: Path, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """``python -c code`` in a new interpreter, attnlab's source and the test helpers importable; with
    ``limit_bytes``, under that file size limit (``ulimit -f``)."""
    env = {**cli_env(cwd), "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)])}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return processes.run([sys.executable, "-c", code], cwd, env, preexec_fn=limit if limit_bytes else None)


@pytest.mark.parametrize(
    ("module", "function", "name", "argv", "phase"),
    [
        (
            "attnlab.cli.eval",
            "typed_eval_config",
            "SIGTERM",
            ["attnlab-eval", "ckpt_path=missing.ckpt"],
            "eval",
        ),
        ("attnlab.cli.report", "read_sweep", "SIGINT", ["attnlab-report", "."], "report"),
        (
            "attnlab.cli.consolidate",
            "is_sharded_checkpoint",
            "SIGHUP",
            ["attnlab-consolidate", "."],
            "consolidate",
        ),
    ],
)
@pytest.mark.process_contract("signals")
def test_a_signal_ends_a_command_with_its_status_and_one_line(
    tmp_path: Path, module: str, function: str, name: str, argv: list[str], phase: str
) -> None:
    code = SIGNAL_AT_CALL.format(module=module, function=function, name=name, argv=argv)
    result = run_python(code, tmp_path)
    assert result.returncode == 128 + getattr(signal, name), result.stderr
    assert result.stderr.splitlines() == [f"interrupted by {name} during {phase}"], result.stderr


@pytest.mark.process_contract("signals")
def test_a_file_size_limit_during_training_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """gpt-tiny's checkpoints (about 0.5 MB) pass no 100 KB limit: the first one fails, named; nothing
    half-written is left."""
    args = [*TINY, *TEXT, "model=gpt-tiny", "logger=none", "sample.max_new_tokens=0", "run_dir=run"]
    code = f"import sys\nsys.argv = {['attnlab-train', *args]!r}\nfrom attnlab.train import main\nmain()\n"
    result = run_python(code, tmp_path, limit_bytes=100_000)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert errors[0].startswith(f"error: cannot write {tmp_path / 'run' / 'checkpoints'}/"), errors[0]
    assert "past this process's file size limit (0.10 MB, ulimit -f)" in errors[0], errors[0]
    run_dir = tmp_path / "run"
    assert not list(run_dir.rglob("*.tmp")) and not list(run_dir.rglob("*.pending")), sorted(
        run_dir.rglob("*")
    )
    assert not [p for p in run_dir.rglob("*") if p.is_file() and p.stat().st_size == 0]
