"""The one place where a test starts a process: a real interpreter (``python -m <module>``), a console
script, torchrun, or ranks spawned by ``torch.multiprocessing``, each as a user's machine would run it.

A process costs a new interpreter's imports (about 5 CPU-s for Lightning and torchmetrics), so a test
starts one only for what a process alone can show, and says which with
``@pytest.mark.process_contract("<kind>")`` (``KINDS``; docs/development.md). Every helper here checks
that the test running now carries that marker (``tests/conftest.py`` records the test, ``running``):
a process started by an unmarked test, or by one of its fixtures, fails it with a one-line message.
``tests/test_process_contracts.py`` fails on a test file that starts a process by any other way, and
on a suite of more process contracts than ``MAX_CONTRACTS``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

MARKER = "process_contract"
# signals: a signal's exit status and line; kills: SIGKILL and what survives it; ranks: several processes
# of one run (DDP, FSDP2, tensor parallel, torchrun's nodes); console: what the interpreter prints;
# packaging: an installed wheel and its console scripts; interpreter: what only a fresh interpreter
# shows (its imports, its exit, files written when it ends).
KINDS = ("signals", "kills", "ranks", "console", "packaging", "interpreter")
MAX_CONTRACTS = 60  # tests marked process_contract in the whole suite
_running: list[pytest.Item] = []
COLLECTED: dict[str, object] = {}  # nodeid: the process-contract kind of every collected test, or None


@contextlib.contextmanager
def running(item: pytest.Item) -> Iterator[None]:
    """While ``item`` runs (its fixtures' setup and teardown included): the test the helpers check."""
    _running.append(item)
    try:
        yield
    finally:
        _running.pop()


def collected(items: list[pytest.Item]) -> None:
    """Record the process-contract kind (None: no marker) of each collected test (``tests/conftest.py``)."""
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is None:
            COLLECTED[item.nodeid] = None
        else:  # a kind outside KINDS (or none) is reported by tests/test_process_contracts.py
            COLLECTED[item.nodeid] = marker.args[0] if len(marker.args) == 1 else repr(marker.args)


def contract_kind() -> str:
    """The process-contract kind of the test running now; fails that test if it carries none."""
    if not _running:
        pytest.fail("a process was started outside a test (at import or collection): start it in a test")
    item = _running[-1]
    marker = item.get_closest_marker(MARKER)
    if marker is None or len(marker.args) != 1:
        pytest.fail(
            f"{item.nodeid} starts a process without @pytest.mark.{MARKER}(<kind>): mark it with one of "
            f"{', '.join(KINDS)}, or run the command in this process (train_cli.command_here, attnlab.run)"
        )
    kind = marker.args[0]
    if kind not in KINDS:
        pytest.fail(
            f"{item.nodeid}: @pytest.mark.{MARKER}({kind!r}): the kind must be one of {', '.join(KINDS)}"
        )
    return kind


def python_module(module: str, args: list[str]) -> list[str]:
    """``python -m <module> *args`` with this interpreter, as a user (or torchrun, or Lightning) runs it."""
    return [sys.executable, "-m", module, *args]


def run(
    argv: list[str | Path],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    **options: object,
) -> subprocess.CompletedProcess:
    """``argv`` run to its end in ``cwd``: stdin from /dev/null, stdout and stderr captured as text."""
    contract_kind()
    return subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        **options,  # type: ignore[arg-type]
    )


class Started:
    """A process running in its own session (its group: the ranks it starts, wandb's service), its
    output written to files (a pipe nobody reads would stop it), or both streams to ``log``: ``pid``,
    ``poll``, ``result``."""

    def __init__(
        self, argv: list[str | Path], cwd: Path, env: dict[str, str] | None, log: Path | None = None
    ) -> None:
        contract_kind()
        self.output = Path(tempfile.mkdtemp(prefix="started-"))
        stdout = log or self.output / "stdout"
        with open(stdout, "wb") as out, open(self.output / "stderr", "wb") as err:
            self.process = subprocess.Popen(
                [str(a) for a in argv],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if log else err,
                start_new_session=True,
            )
        self.pid = self.process.pid
        self.stdout = stdout
        self.done: subprocess.CompletedProcess | None = None

    def poll(self) -> int | None:
        return self.process.poll()

    def result(self, timeout: float = 300) -> subprocess.CompletedProcess:
        """Wait for the process (past ``timeout`` seconds its group is killed and TimeoutExpired raised);
        its exit status and what it printed (the files it was captured in removed)."""
        if self.done is None:
            try:
                code = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                kill_group(self.pid)
                self.process.wait()
                raise
            out = self.stdout.read_text(errors="replace")
            err = (self.output / "stderr").read_text(errors="replace")
            shutil.rmtree(self.output, ignore_errors=True)
            self.done = subprocess.CompletedProcess(self.process.args, code, out, err)
        return self.done

    def kill_when(self, ready: Callable[[], bool], timeout: float = 300) -> subprocess.CompletedProcess:
        """SIGKILL the whole group once ``ready()`` (a file written, a shard listed), as a scheduler or a
        dead machine would; fails if the process ended first. Returns once the group is gone."""
        deadline = time.monotonic() + timeout
        while not ready() and self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        kill_group(self.pid)
        result = self.result(timeout=60)
        assert result.returncode == -signal.SIGKILL, (
            f"the process ended (exit {result.returncode}) before it could be killed\n{result.stderr[-3000:]}"
        )
        wait_until_group_is_gone(self.pid)
        return result


def start(
    argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None, log: Path | None = None
) -> Started:
    """``argv`` started in a session of its own (see ``Started``)."""
    return Started(argv, cwd, env, log)


def kill_group(pid: int) -> None:
    """SIGKILL the process group that ``pid`` leads."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def wait_until_group_is_gone(pgid: int, timeout: float = 30.0) -> None:
    """Until no process of the group ``pgid`` is left (a killed run's wandb service holds its run id)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def live_processes_of_group(pgid: int, timeout: float = 30.0) -> list[int]:
    """The processes of the group ``pgid`` still running once they have had ``timeout`` seconds to end
    (an empty list as soon as none is). Zombies are left out: an ended process whose parent ended first
    waits for init to reap it, which some containers' init never does."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid, group, state in process_table() if group == pgid and state != "Z"]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def process_table() -> list[tuple[int, int, str]]:
    """(pid, process group, state) of every process of this machine, from /proc."""
    table = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # after "pid (name)": state, ppid, pgrp
        except OSError:  # ended meanwhile
            continue
        table.append((int(stat.parent.name), int(fields[2]), fields[0]))
    return table


def spawn_ranks(
    function: Callable[..., None], nprocs: int, *args: object, start_method: str = "spawn"
) -> None:
    """``function(rank, *args)`` in ``nprocs`` new interpreters (``torch.multiprocessing``'s spawn, as
    torch's own distributed tests start ranks), or forked from this process (``start_method="fork"``:
    only where the ranks run no autograd, whose threads do not survive a fork); raises if a rank fails."""
    import torch.multiprocessing

    contract_kind()
    torch.multiprocessing.start_processes(
        function, args=args, nprocs=nprocs, join=True, start_method=start_method
    )
