"""Run ``python -m attnlab.<command>`` as a process forked from one that has already imported torch,
Lightning, Hydra, wandb and attnlab (multiprocessing's fork server with those modules preloaded).

The child is a new process like any other: its own pid (and, on request, its own session, so that
the whole group can be killed), working directory, environment, arguments, stdin from /dev/null,
stdout and stderr captured, signal handlers, and an exit status that follows the interpreter's rules
(``sys.exit(n)`` gives n, an uncaught exception prints its traceback and gives 1, a signal gives
minus its number). It only skips the seconds of imports that every new interpreter pays, which
were most of the time of a tiny training run in the test suite.

A two-process run (DDP, FSDP2, tensor parallel) forks its rank 0 like any command; Lightning starts
the other ranks as ``sys.executable -m attnlab.<command>`` (read from ``__main__.__spec__`` as ``-m``
leaves it), and a forked command's ``sys.executable`` forks them from the same server
(``forked_ranks``). What depends on the interpreter's own start stays in real subprocesses:
warnings printed while modules are imported (test_clean_output, its commands in one interpreter,
``one_interpreter``), and the imports themselves (test_validation_imports_neither_torch_nor_lightning).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from multiprocessing.context import ForkServerContext
from pathlib import Path

import forked_ranks

# What a command imports on its way to training, evaluating or sampling; a module left out is
# imported by each child instead (correct, only slower).
PRELOAD = [
    "torch",
    "pytorch_lightning",
    "torchmetrics",
    "hydra",
    "omegaconf",
    "wandb",
    # wandb.init imports its launch package on every run (StagedLaunchInputs): 2.7 CPU-s of pydantic models
    "wandb.sdk.launch.inputs.internal",
    "tokenizers",
    "matplotlib.pyplot",
    "attnlab.train",
    "attnlab.eval",
    "attnlab.sample",
    "attnlab.cli.compress",
    "attnlab.cli.explain",
    "attnlab.cli.report",
    "attnlab.training.trainer",
    "attnlab.tasks",
    "attnlab.data",
    "forked_server_modules",  # every attnlab module, and what multi-process runs import on their way
    "forked",
    "forked_server_frozen",  # last: what the modules above made, out of the children's collections
]
_context: ForkServerContext | None = None
_launcher: Path | None = None


def fork_server() -> ForkServerContext:
    """This process's fork server, started (and its modules imported) on first use, and the launcher
    that its commands' other ranks are started by (``forked_ranks``)."""
    global _context, _launcher
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
        start_server_with_this_folder_importable()
        folder = Path(tempfile.mkdtemp(prefix="forked-launcher-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _launcher = forked_ranks.write_launcher(folder)
    return _context


def start_server_with_this_folder_importable() -> None:
    """Start the fork server now, with this folder on its ``PYTHONPATH`` for as long as that takes.

    The modules of ``PRELOAD`` that live here (``forked_server_modules``, ``forked``,
    ``forked_server_frozen``) are found only on the test process's ``sys.path``, which Python 3.11's
    fork server is handed but never applies (``multiprocessing.forkserver.main`` ignores its
    ``sys_path``), and a preload that raises ImportError is skipped without a word: the server
    imported none of them, and each forked command imported what they would have."""
    here = str(Path(__file__).resolve().parent)
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([here, before] if before else [here])
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def torchrun_environment(forked_pids: Path) -> dict[str, str]:
    """What makes torchrun start its workers (``PYTHON_EXEC -u -m attnlab.<command> ...``) forked from
    this process's fork server (started here if it is not yet) through the launcher, each launcher
    writing its child's pid under ``forked_pids`` (``forked_ranks.FORKED_PIDS_ENV``)."""
    fork_server()
    multiprocessing.forkserver.ensure_running()
    return {
        "PYTHON_EXEC": str(_launcher),
        forked_ranks.LAUNCHER_ENV: str(_launcher),
        forked_ranks.FORK_SERVER_ENV: forked_ranks.fork_server_address(),
        forked_ranks.FORKED_PIDS_ENV: str(forked_pids),
    }


class Forked:
    """A running command: ``pid``, ``poll()``, ``wait()``, ``result()`` like a ``subprocess.Popen``."""

    def __init__(
        self, command: str, args: list[str], cwd: Path, env: dict[str, str], new_session: bool
    ) -> None:
        self.argv = [sys.executable, "-m", f"attnlab.{command}", *args]
        self.output = Path(tempfile.mkdtemp(prefix="forked-"))
        server = fork_server()
        env = {**env, forked_ranks.LAUNCHER_ENV: str(_launcher)}
        self.process = server.Process(
            target=run_command,
            args=(command, args, str(cwd), env, str(self.output), new_session),
            daemon=False,
        )
        self.process.start()
        self.pid = self.process.pid

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; after ``timeout`` seconds the command (and its group) is killed and
        ``subprocess.TimeoutExpired`` raised."""
        self.process.join(timeout)
        if self.process.exitcode is None:
            kill_group(self.pid)
            self.process.join()
            raise subprocess.TimeoutExpired(self.argv, timeout or 0)
        return self.process.exitcode

    def result(self, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Wait for the command; its exit status and what it printed (the captured files removed)."""
        try:
            code = self.wait(timeout)
            out, err = ((self.output / name).read_text(errors="replace") for name in ("stdout", "stderr"))
        finally:
            for name in ("stdout", "stderr"):
                (self.output / name).unlink(missing_ok=True)
            self.output.rmdir()
        return subprocess.CompletedProcess(self.argv, code, out, err)


def kill_group(pid: int) -> None:
    """SIGKILL the process and, when it leads one, its process group."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


def run(
    command: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """``subprocess.run([python, -m, attnlab.<command>, *args], capture_output=True, text=True)``, forked."""
    return Forked(command, args, cwd, env, new_session=False).result(timeout)


# In the child ------------------------------------------------------------------------------------


def run_command(
    command: str, args: list[str], cwd: str, env: dict[str, str], output: str | None, new_session: bool
) -> None:
    """The child: set up the process as the interpreter would for ``python -m attnlab.<command>``,
    run the command's ``main``, and exit with the status the interpreter would give.

    ``output``: the folder its stdout and stderr are captured in; None for another rank, which takes
    its launcher's streams and dies with it (``forked_ranks``)."""
    if new_session:
        os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for entry in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    if output is None:
        stdin, stdout, stderr, lifeline = multiprocessing.forkserver.get_inherited_fds()
        for inherited, fd in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(inherited, fd)
        threading.Thread(target=die_with_launcher, args=(lifeline,), daemon=True).start()
    else:
        capture(1, Path(output) / "stdout")
        capture(2, Path(output) / "stderr")
    forked_ranks.start_other_ranks_forked()
    lightning_loggers_as_a_command_imports_them()
    sys.stdout = sys.__stdout__ = standard_stream(1)
    sys.stderr = sys.__stderr__ = standard_stream(2)
    module = importlib.import_module(f"attnlab.{command}")
    sys.argv = [str(module.__file__), *args]
    # What ``-m`` leaves in ``__main__``: Lightning's DDP launcher restarts ``python -m <__spec__.name>``.
    sys.modules["__main__"].__spec__ = module.__spec__
    os._exit(status_of(module.main))


def lightning_loggers_as_a_command_imports_them() -> None:
    """Lightning's loggers as a command leaves them, propagating to the root logger (so its INFO lines,
    such as "Restoring states from the checkpoint path at ...", reach ``train.log``).

    Lightning, imported before any logging is configured, gives its loggers a console handler of their
    own and stops them propagating; the fork server imports it so, whereas a command imports it only
    after Hydra has configured logging, where Lightning does neither."""
    for name in ("pytorch_lightning", "lightning_fabric"):
        logger = logging.getLogger(name)
        if not logger.propagate:
            logger.handlers = [h for h in logger.handlers if type(h) is not logging.StreamHandler]
            logger.propagate = True


def standard_stream(fd: int) -> io.TextIOWrapper:
    """The text stream on ``fd`` (1: stdout, 2: stderr) as the interpreter makes it: stderr line
    buffered, and with ``PYTHONUNBUFFERED`` (``python -u``, as torchrun runs its workers) both written
    through to the file at once."""
    if os.environ.get("PYTHONUNBUFFERED"):
        raw = io.FileIO(fd, "w", closefd=False)
        return io.TextIOWrapper(raw, line_buffering=fd == 2, write_through=True)
    return open(fd, "w", buffering=1 if fd == 2 else -1, closefd=False)


def die_with_launcher(lifeline: int) -> None:
    """Block until the launcher of this rank is gone (its end of the pipe closed), then die as it did."""
    os.read(lifeline, 1)
    os.kill(os.getpid(), signal.SIGKILL)


def capture(fd: int, path: Path) -> None:
    file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(file, fd)
    os.close(file)


def status_of(main: object) -> int:
    """Call ``main`` and end as the interpreter ends: non-daemon threads joined, atexit handlers run,
    streams flushed; the exit status it would give."""
    try:
        main()  # type: ignore[operator]
        status = 0
    except SystemExit as stop:
        status = exit_status(stop.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # the interpreter ends so on an uncaught Ctrl-C
        status = 1
    except BaseException:  # the interpreter prints any uncaught exception
        traceback.print_exc()
        status = 1
    finish()
    return status


def exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish() -> None:
    """What the interpreter does on its way out (``threading._shutdown``): tell the thread pools to stop
    (``concurrent.futures`` registers that hook; torch.compile's workers are such a pool), join the
    non-daemon threads, run atexit, flush."""
    for hook in list(getattr(threading, "_threading_atexits", ())):
        hook()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a stream the command closed
            stream.flush()
