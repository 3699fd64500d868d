"""The test suite's process launcher (``forked``, ``forked_ranks``): a rank that Lightning starts from a
forked command is forked from the same server, with the launcher's streams and exit status, and dies
with its launcher; any other command line runs the real interpreter."""

from __future__ import annotations

import multiprocessing.forkserver
import signal
import subprocess
import sys
import time
from pathlib import Path

import forked
import forked_ranks
from train_cli import cli_env


def launcher_env(cwd: Path) -> dict[str, str]:
    """A forked command's environment, as its rank 0 hands it to the ranks it starts."""
    forked.run("train", ["--help"], cwd, cli_env(cwd), timeout=120)  # the server is up
    return {**cli_env(cwd), forked_ranks.FORK_SERVER_ENV: forked_ranks.fork_server_address()}


def children_of(pid: int) -> set[int]:
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.add(int(stat.parent.name))
    return children


def test_a_rank_command_line_is_forked_with_the_launchers_streams_and_status(tmp_path: Path) -> None:
    env = launcher_env(tmp_path)
    done = subprocess.run(
        [str(forked._launcher), "-m", "attnlab.train", "model.n_heads=3"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "error: model.d_model=128: must be divisible by model.n_heads=3",
    )


def test_any_other_command_line_runs_the_real_interpreter(tmp_path: Path) -> None:
    env = launcher_env(tmp_path)
    done = subprocess.run(
        [str(forked._launcher), "-c", "import sys; print(sys.executable); sys.exit(3)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout.strip()) == (3, sys.executable)


def test_a_killed_launcher_takes_its_forked_rank_with_it(tmp_path: Path) -> None:
    env = launcher_env(tmp_path)
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    before = children_of(server)
    args = ["model=gpt-tiny", "trainer.max_steps=100000", "logger=none", "run_dir=run"]
    launcher = subprocess.Popen([str(forked._launcher), "-m", "attnlab.train", *args], cwd=tmp_path, env=env)
    deadline = time.monotonic() + 120
    while not (tmp_path / "run").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    (rank,) = children_of(server) - before
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=30)
    while rank in children_of(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rank not in children_of(server), "the forked rank outlived its launcher"


def modules_of_a_forked_child(names: list[str]) -> list[str]:
    """Which of ``names`` a child of the fork server holds before it imports anything."""
    return [name for name in names if name in sys.modules]


def test_the_fork_server_imported_every_module_it_preloads() -> None:
    """Those that live in tests/cli too (Python 3.11's server is not given the test process's sys.path,
    and skips a preload that fails to import without a word), and every attnlab module they import."""
    expected = [*forked.PRELOAD, "attnlab.data.images", "optuna", "torch.distributed.checkpoint"]
    with forked.fork_server().Pool(1) as pool:
        assert pool.apply(modules_of_a_forked_child, (expected,)) == expected
