"""One run per directory: a second attnlab-train on a directory that a live run writes is one line, exit 2,
and touches nothing; a lock left by a killed run is taken over; the lock is rank 0's and goes at the end.

The live run that holds the directory is a process of its own (the lock is the kernel's, per process);
the commands beside it and after it run in this process (``command_here``)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from in_process import restored
from omegaconf import OmegaConf
from train_cli import TEXT, TINY, check, cli_env, command_here

import processes
from attnlab.cli.train import claim_run_dir
from attnlab.schema.errors import ConfigError
from attnlab.schema.rundir import LOCK_FILE
from attnlab.training.lock import lock_run_dir, unlock_run_dirs

ARGS = [*TINY, *TEXT, "model=gpt-tiny", "logger=csv", "sample.max_new_tokens=0"]


def snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``run_dir``: its size and modification time (ns)."""
    return {
        str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def wait_for(path: Path, proc: processes.Started, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.process_contract("ranks")
def test_a_second_run_on_a_busy_directory_is_refused_and_touches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``attnlab-train run_dir=run seed=1337`` (a process) holds run/; ``... run_dir=run seed=7`` meanwhile
    (here): one line, exit 2, not a byte of run/ changed; the first run then completes with its own files."""
    run_dir, paused, resume = tmp_path / "run", tmp_path / "paused", tmp_path / "resume"
    pause = (
        f"+callbacks.pause={{_target_:fault_injection.PauseAtStep,step:2,paused:{paused},resume:{resume}}}"
    )
    command = [sys.executable, "-m", "attnlab.train", *ARGS, "run_dir=run", "seed=1337", pause]
    log = tmp_path / "first.log"
    first = processes.start(command, tmp_path, cli_env(tmp_path), log=log)
    try:
        wait_for(paused, first, log)
        before = snapshot(run_dir)
        assert LOCK_FILE in before
        owner = json.loads((run_dir / LOCK_FILE).read_text())
        assert owner["pid"] == first.pid

        second = command_here([*ARGS, "run_dir=run", "seed=7"], tmp_path, monkeypatch, capsys)
        assert second.returncode == 2, second.stderr
        assert second.stderr.splitlines() == [second.stderr.strip()], second.stderr  # one line, no traceback
        assert second.stderr.startswith(
            f"error: run_dir={run_dir}: is in use by another run (pid {first.pid} "
        )
        assert snapshot(run_dir) == before
    finally:
        resume.touch()
        finished = first.result(timeout=300)  # past it, the group is killed
    assert finished.returncode == 0, finished.stdout[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    assert "seed: 1337" in (run_dir / "config.yaml").read_text()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in rows if "train/loss" in r) == list(range(1, 7))  # every step, once
    assert sorted(r["step"] for r in rows if "val/loss" in r) == [3, 6]
    assert not (run_dir / LOCK_FILE).exists()  # released at the end


@pytest.mark.slow
def test_the_lock_of_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    """A ``run.lock`` that no process holds (its run was SIGKILLed) does not stop the resume."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    dead = {"pid": 2**22 + 1, "host": "elsewhere", "started": "2025-01-01T00:00:00+00:00"}
    (run_dir / LOCK_FILE).write_text(json.dumps(dead))
    with restored():
        check(
            command_here(
                [*ARGS, "run_dir=run", "trainer.max_steps=2", "trainer.val_every_n_steps=2"], tmp_path
            )
        )
    assert not (run_dir / LOCK_FILE).exists()


def test_a_held_lock_names_its_owner_and_is_refused(tmp_path: Path) -> None:
    """Another open file description holding the flock is another run (as another process would be)."""
    import fcntl

    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": 4242, "host": "node7", "started": "then"}))
    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(ConfigError, match=r"in use by another run \(pid 4242 on node7 since then"):
            lock_run_dir(tmp_path)
    finally:
        os.close(fd)
    lock_run_dir(tmp_path)  # released: free
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock_run_dir(tmp_path)  # again in the same process: nothing
    unlock_run_dirs()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_file_as_run_dir_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("not a directory")
    with pytest.raises(ConfigError, match=r"^run_dir=.*taken: is a file, not a directory"):
        lock_run_dir(tmp_path / "taken")


def test_an_unwritable_run_dir_names_run_dir(tmp_path: Path) -> None:
    """A run_dir that cannot be made (here: below a file) is one line naming run_dir, not a bare errno."""
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"^run_dir=.*file/run: cannot be written: Not a directory$"):
        lock_run_dir(tmp_path / "file" / "run")


def test_only_rank_zero_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torchrun every rank validates; rank 0 holds the directory for all of them."""
    monkeypatch.setenv("RANK", "1")
    claim_run_dir(None, tmp_path / "run")  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("RANK", "0")
    claim_run_dir(OmegaConf.create({}), tmp_path / "run")
    assert (tmp_path / "run" / LOCK_FILE).exists()
    unlock_run_dirs()
