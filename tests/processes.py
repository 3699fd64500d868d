"""The one place where a test starts a process: a real interpreter (``python -m <module>``), a console
script, torchrun, or ranks spawned by ``torch.multiprocessing``, each as a user's machine would run it.

A process costs a new interpreter's imports (about 5 CPU-s for Lightning and torchmetrics), so a test
starts one only for what a process alone can show, and says which with
``@pytest.mark.process_contract("<kind>")`` (``KINDS``; docs/development.md). Every helper here checks
that the test running now carries that marker (``tests/conftest.py`` records the test, ``running``):
a process started by an unmarked test, or by one of its fixtures, fails it with a one-line message.
``tests/test_process_contracts.py`` fails on a test file that starts a process by any other way, and
on a suite of more process contracts than ``MAX_CONTRACTS``.

A run of one process that a test kills (``kills``) is forked from Python's fork server with the
commands' imports preloaded (``start_preloaded``: a fork instead of a new interpreter's imports); every
other process is a real interpreter (``Preloaded`` says why).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import multiprocessing.forkserver
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
        self.args = self.process.args
        self.stdout = stdout
        self.done: subprocess.CompletedProcess | None = None

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float) -> int:
        """The exit status; past ``timeout`` seconds the group is killed and TimeoutExpired raised."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_group(self.pid)
            self.process.wait()
            raise

    def result(self, timeout: float = 300) -> subprocess.CompletedProcess:
        """Wait for the process (past ``timeout`` seconds its group is killed and TimeoutExpired raised);
        its exit status and what it printed (the files it was captured in removed)."""
        if self.done is None:
            code = self.wait(timeout)
            out = self.stdout.read_text(errors="replace")
            err = (self.output / "stderr").read_text(errors="replace")
            shutil.rmtree(self.output, ignore_errors=True)
            self.done = subprocess.CompletedProcess(self.args, code, out, err)
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


# What a run of attnlab-train imports (about 6 CPU-s in a new interpreter): the fork server imports it
# once, each child is forked with it; what is left out, a child imports for itself.
PRELOADED = [
    "processes",  # the children's entry point (and pytest)
    "torch",
    "pytorch_lightning",
    "wandb",
    "attnlab.cli.train",
    "attnlab.data.module",
    "attnlab.tasks",
    "attnlab.models.hf",
    "attnlab.models.parallel",
    "attnlab.training.callbacks",
    "attnlab.training.trainer",
    "attnlab.run.families",
]


class Preloaded(Started):
    """A command's ``main`` run in a child of Python's fork server (``multiprocessing``'s
    ``forkserver``, which imported ``PRELOADED`` once per pytest process), in a session of its own, its
    output written to files, as ``Started`` runs a new interpreter: ``pid``, ``poll``, ``result``,
    ``kill_when``; its exit status as ``subprocess`` reports it (-9: SIGKILL).

    Only for a run that is killed (``process_contract("kills")``): what such a test checks is what is
    on disk after the kill and what a resume makes of it, and SIGKILL runs nothing of the process's end
    (no ``finally``, no ``atexit``). A child is not a new interpreter: it starts with the server's
    imports, import-time reads of the environment and hash seed, and ends through ``multiprocessing``
    (no ``atexit``, no flush of Python's buffers at a normal exit), so a run that must end by itself,
    a signal's exit and line, what the console shows and what an interpreter does are tested with real
    interpreters (``start``, ``run``). Lightning's and torchrun's other ranks are interpreters they start
    themselves, so runs of several processes are ``start``ed too."""

    def __init__(self, entry: str, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        kind = contract_kind()
        if kind != "kills":
            pytest.fail(
                f"process_contract({kind!r}): a run forked from the preloaded server serves only tests of "
                "kills; start a real interpreter (processes.start, processes.run)"
            )
        self.output = Path(tempfile.mkdtemp(prefix="preloaded-"))
        self.stdout = self.output / "stdout"
        files = (str(self.stdout), str(self.output / "stderr"))
        self.process = fork_server().Process(
            target=run_in_session, args=(entry, argv, str(cwd), env, *files), name=argv[0]
        )
        self.process.start()
        self.pid = self.process.pid
        self.args = list(argv)
        self.done = None

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float) -> int:
        """The exit status; past ``timeout`` seconds the group is killed and TimeoutExpired raised."""
        self.process.join(timeout)
        if self.process.exitcode is None:
            kill_group(self.pid)
            self.process.kill()  # if it has not reached its own session yet
            self.process.join()
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.process.exitcode


def start_preloaded(entry: str, argv: list[str], cwd: Path, env: dict[str, str]) -> Preloaded:
    """``entry`` (``"module:function"``, a console script's entry point) called with ``sys.argv`` =
    ``argv``, in ``cwd`` with the environment ``env``, forked from the preloaded server (see
    ``Preloaded``): only in a test marked ``process_contract("kills")``."""
    return Preloaded(entry, argv, cwd, env)


def fork_server() -> multiprocessing.context.ForkServerContext:
    """Python's fork server, started on first use with ``PRELOADED`` imported; it ends with this process.

    It imports from this process's ``sys.path`` (Python 3.11's server ignores the path that
    ``multiprocessing`` sends it, so the path is its PYTHONPATH): this checkout's attnlab and the
    tests' helpers. It only imports, before any torch op or thread (``run_in_session`` checks), so
    each child is forked from a clean, single-threaded process."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, sys.path)))
        multiprocessing.forkserver.ensure_running()
    return context


def run_in_session(
    entry: str, argv: list[str], cwd: str, env: dict[str, str], stdout: str, stderr: str
) -> None:
    """In a child of the fork server: a session of its own (its group is what a test kills), output to
    the files ``stdout`` and ``stderr``, ``cwd``, the environment ``env`` (and its PYTHONPATH on
    ``sys.path``, as an interpreter would have it) and ``sys.argv``; then ``entry`` is called."""
    os.setsid()
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
    refuse_an_unsafe_fork()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:0] = path
    sys.argv = list(argv)
    module, _, function = entry.partition(":")
    getattr(importlib.import_module(module), function)()


def refuse_an_unsafe_fork() -> None:
    """Fail this child if the server it was forked from ran threads (OpenMP's or autograd's, started by
    a torch op) or initialised CUDA: a fork copies neither threads nor a GPU context, and what they
    held would never be released in the child."""
    tasks = Path(f"/proc/{os.getppid()}/task")  # Linux: one entry per thread of the server
    threads = len(os.listdir(tasks)) if tasks.is_dir() else 1
    torch = sys.modules.get("torch")
    if threads != 1 or (torch is not None and torch.cuda.is_initialized()):
        raise RuntimeError(
            f"the fork server runs {threads} threads or has CUDA initialised: a preloaded module ran a "
            "torch op at import; take it off processes.PRELOADED"
        )


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
