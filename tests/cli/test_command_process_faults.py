"""What only real processes show of the signal and full-disk policy (docs/fault-tolerance.md), the
phases themselves being tested in this process (test_command_signal_phases, test_command_disk_full):

- a signal sent by another process, as a terminal (Ctrl-C: SIGINT) or a scheduler (SIGTERM) sends it,
  to attnlab-sample and attnlab-compress while they wait in their work or inside torch's zip writer:
  the status a shell reports (130, 143), one line, no traceback, no file left;
- a full disk under FSDP2 with two ranks and sharded checkpoints (each rank writes its own shards): one
  line naming the checkpoint, from rank 0 only (rank 1 printed an 80-line traceback), ``summary.json``
  ``failed`` (it stayed ``running`` where the half-written shards kept the disk full), no shard left.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_command_signal_phases import COMMON, RUNS
from train_cli import HERE, TEST_PRESETS, cli_env, shared_tiny_checkpoints

import processes

pytestmark = pytest.mark.slow
SRC = Path(__file__).resolve().parents[2] / "src"

# In a new interpreter: ``waiting()`` creates the file ``marker`` and sleeps (a minute at most), for the
# test's signal to arrive there; then the command's main runs, with ``waiting`` at the call chosen.
WAITING = """
import sys, time
from pathlib import Path
def waiting():
    Path({marker!r}).touch()
    time.sleep(60)
"""
WAIT_AT_CALL = """
import {module} as target
original = target.{function}
def wrapped(*args, **kwargs):
    waiting()
    return original(*args, **kwargs)
target.{function} = wrapped
"""
# torch's zip writer calls the file's write from C++: its third write waits for the signal there.
WAIT_IN_WRITES = """
import attnlab.training.files as target
class Waiting:
    def __init__(self, file):
        self.file, self.writes = file, 0
    def write(self, data):
        self.writes += 1
        if self.writes == 3:
            waiting()
        return self.file.write(data)
    def __getattr__(self, name):
        return getattr(self.file, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.file.close()
target.open = lambda *args, **kwargs: Waiting(open(*args, **kwargs))
"""
RUN_MAIN = """
sys.argv = {argv!r}
from attnlab.cli.{command} import main
main()
"""


def waiting_code(command: str, argv: list[str], marker: Path, where: str) -> str:
    """The program: ``command``'s main with ``argv``, waiting at ``where`` (``module:function``, or
    ``writes``: inside torch's zip writer)."""
    if where == "writes":
        patch = WAIT_IN_WRITES
    else:
        module, function = where.split(":")
        patch = WAIT_AT_CALL.format(module=module, function=function)
    return WAITING.format(marker=str(marker)) + patch + RUN_MAIN.format(argv=argv, command=command)


@pytest.fixture(scope="module")
def checkpoint(built_once: Callable[..., Path]) -> Path:
    return shared_tiny_checkpoints(built_once, "command_signal_phases", RUNS, COMMON)("gpt")


def env_for(cwd: Path) -> dict[str, str]:
    return {**cli_env(cwd), "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)])}


def signalled_from_outside(code: str, cwd: Path, marker: Path, signum: int) -> subprocess.CompletedProcess:
    """Run ``python -c code`` in ``cwd``; once it creates ``marker``, send it ``signum``."""
    proc = processes.start([sys.executable, "-c", code], cwd, env_for(cwd))
    deadline = time.monotonic() + 300
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None:
        os.kill(proc.pid, signum)
    return proc.result(timeout=120)


@pytest.mark.process_contract("signals")
@pytest.mark.parametrize(
    ("command", "where", "name"),
    [("sample", "attnlab.run.families:generate", "SIGINT"), ("compress", "writes", "SIGTERM")],
)
def test_a_signal_from_another_process_ends_the_command_in_one_line(
    checkpoint: Path, tmp_path: Path, command: str, where: str, name: str
) -> None:
    marker = tmp_path / "waiting"
    argv = {
        "sample": ["attnlab-sample", f"ckpt_path={checkpoint}", "prompt=To be", "max_new_tokens=4"],
        "compress": [
            "attnlab-compress",
            f"ckpt_path={checkpoint}",
            "method=int8",
            f"out={tmp_path / 'c.ckpt'}",
        ],
    }[command]
    signum = getattr(signal, name)
    result = signalled_from_outside(waiting_code(command, argv, marker, where), tmp_path, marker, signum)
    assert marker.exists(), result.stderr
    assert result.returncode == 128 + signum, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.rstrip().splitlines()[-1] == f"interrupted by {name} during {command}", result.stderr
    assert [line for line in result.stderr.splitlines() if "interrupted" in line or "rror" in line] == [
        f"interrupted by {name} during {command}"
    ], result.stderr
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["waiting"]


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[tuple[Path, int | None]]:
    """A 600 KB tmpfs (one sharded checkpoint of the tiny GPT does not fit beside the run's other files),
    and no file size limit; where no tmpfs can be mounted, ``tmp_path`` and a 100 KB file size limit."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = processes.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)])
    if made.returncode != 0:
        yield mount, 100_000
        return
    try:
        yield mount, None
    finally:
        processes.run(["umount", "-l", str(mount)])


@pytest.mark.process_contract("ranks")
def test_a_full_disk_under_fsdp2_with_two_ranks_is_one_line_and_a_failed_summary(
    full_disk: tuple[Path, int | None], tmp_path: Path
) -> None:
    disk, limit = full_disk
    run_dir = disk / "run"
    args = [
        TEST_PRESETS,
        "experiment=tiny_gpt",
        "data.seq_len=32",
        "trainer=fsdp2_sim",
        "data.batch_size=8",
        "checkpoint.sharded=true",
        "trainer.max_steps=6",
        "trainer.val_every_n_steps=3",
        "checkpoint.every_n_steps=3",
        "trainer.limit_val_batches=2",
        "trainer.enable_progress_bar=false",
        "sample.max_new_tokens=0",
        "logger=none",
        "test_after_fit=false",
        f"run_dir={run_dir}",
    ]
    script = Path(sys.executable).with_name("attnlab-train")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "attnlab.train"]

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    result = processes.run(
        [*command, *args],
        tmp_path,
        env_for(tmp_path),
        timeout=400,
        preexec_fn=limited if limit else None,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "[rank1]" not in result.stderr, result.stderr[-3000:]
    checkpoint = run_dir / "checkpoints" / "best-step000003.ckpt"
    if limit is None:
        assert errors[0].startswith(f"error: no space left on device to write {checkpoint}: needs about "), (
            errors
        )
    else:
        assert errors[0].startswith(f"error: cannot write {checkpoint}: it needs about "), errors
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("DiskFullError: "), summary
    assert str(checkpoint) in summary["error"]
    left = sorted((run_dir / "checkpoints").iterdir())
    assert left == [], left  # no shard, no staging folder
    assert not [p for p in run_dir.rglob("*") if p.is_file() and p.stat().st_size == 0]
