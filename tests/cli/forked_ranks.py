"""The other ranks of a forked two-process run, forked from the same fork server as its rank 0.

Lightning starts rank 1 of a DDP, FSDP2 or tensor-parallel run as ``[sys.executable, "-m",
"attnlab.train", *args]``, a new interpreter that pays the seconds of imports that ``forked`` saves
rank 0 (about 7 CPU-seconds per run, most of a tiny two-process test). A forked command's
``sys.executable`` is therefore this launcher: a small script (``write_launcher``) that asks the fork
server for a child running ``attnlab.<command>`` with the launcher's arguments, working directory,
environment and standard streams, and then stands in for that child: it forwards the signals it
gets, dies with it (a SIGKILL of the launcher, which it cannot forward, ends the child through a
pipe it holds, ``LIFELINE``) and ends with the child's exit status. Any other command line (a
compiler worker, ``-c``) is handed to the real interpreter unchanged (``os.execv``).

torchrun's workers (``PYTHON_EXEC -u -m attnlab.train ...``) are forked by the same launcher
(``forked.torchrun_environment``); a test that must stop or kill a node's worker finds it through the
file the launcher writes under ``FORKED_PIDS_ENV`` (the child is the fork server's, not the launcher's).
"""

from __future__ import annotations

import io
import os
import signal
import socket
import sys
from multiprocessing import forkserver, process, reduction
from multiprocessing.context import ForkServerContext, set_spawning_popen
from pathlib import Path

# Where the launcher finds the fork server (its socket address, hex-encoded: it may begin with NUL).
FORK_SERVER_ENV = "ATTNLAB_TEST_FORK_SERVER"
# The launcher script, set by ``forked.Forked`` in the environment of every forked command.
LAUNCHER_ENV = "ATTNLAB_TEST_LAUNCHER"
# A folder where each launcher writes the pid of its forked child in a file named by its own pid.
FORKED_PIDS_ENV = "ATTNLAB_TEST_FORKED_PIDS"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def write_launcher(folder: Path) -> Path:
    """The launcher script, run by this interpreter, in ``folder``."""
    path = folder / "python"
    here = str(Path(__file__).resolve().parent)
    path.write_text(
        f"#!{sys.executable}\n"
        f"import sys\nsys.path.insert(0, {here!r})\n"
        f"import forked_ranks\nforked_ranks.launch({sys.executable!r}, sys.argv[1:])\n"
    )
    path.chmod(0o755)
    return path


def fork_server_address() -> str | None:
    """This process's fork server's socket address as ``FORK_SERVER_ENV`` holds it (None if it has none):
    the server's own in the process that started it, inherited in the processes it forked."""
    address = forkserver._forkserver._forkserver_address
    if not address:
        return None
    return (address if isinstance(address, bytes) else address.encode()).hex()


def start_other_ranks_forked() -> None:
    """In a forked command: make the ranks that Lightning starts (``sys.executable -m ...``) forked too."""
    launcher, address = os.environ.get(LAUNCHER_ENV), fork_server_address()
    if launcher and address:
        sys.executable = launcher
        os.environ[FORK_SERVER_ENV] = address


def launch(interpreter: str, args: list[str]) -> None:
    """Run ``python *args``: forked when it is ``[-u] -m attnlab.<command> ...`` and a fork server is
    named (``-u``, torchrun's, as ``PYTHONUNBUFFERED`` in the child's environment)."""
    address = os.environ.get(FORK_SERVER_ENV)
    unbuffered = args[:1] == ["-u"]
    module_args = args[1:] if unbuffered else args
    forkable = len(module_args) >= 2 and module_args[0] == "-m" and module_args[1].startswith("attnlab.")
    if not (address and forkable):
        os.execv(interpreter, [interpreter, *args])
    if unbuffered:
        os.environ["PYTHONUNBUFFERED"] = "1"
    command = module_args[1].removeprefix("attnlab.")
    lifeline, _keep_alive = os.pipe()  # the child dies when _keep_alive closes, i.e. with this process
    pid, status = start_forked(bytes.fromhex(address), command, module_args[2:], lifeline)
    os.close(lifeline)
    record_forked_child(pid)
    for signum in FORWARDED:
        signal.signal(signum, lambda signum, _frame: os.kill(pid, signum))
    code = forkserver.read_signed(status)
    if code < 0:  # the child was killed by a signal: so is this process
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def record_forked_child(pid: int) -> None:
    """Write ``pid``, this launcher's forked child, in ``FORKED_PIDS_ENV``'s folder (if set), in a file
    named by this launcher's pid: whoever stops or kills this process's descendants finds it there."""
    folder = os.environ.get(FORKED_PIDS_ENV)
    if folder:
        written = Path(folder) / f"{os.getpid()}.tmp"
        written.write_text(str(pid))
        written.rename(written.with_suffix(""))  # complete when it appears


def forked_child(launcher: int, folder: Path) -> int | None:
    """The pid of the child that the launcher ``launcher`` forked, as it recorded in ``folder``."""
    try:
        return int((folder / str(launcher)).read_text())
    except (OSError, ValueError):
        return None


class _PassFds:
    """What multiprocessing's pickler asks of the process being started (``set_spawning_popen``)."""

    def __init__(self) -> None:
        self.fds: list[int] = []


def start_forked(address: bytes, command: str, args: list[str], lifeline: int) -> tuple[int, int]:
    """Ask the fork server at ``address`` for a child running ``forked.run_command``; its pid and the
    pipe on which the server writes its exit status (the protocol of ``multiprocessing.forkserver``)."""
    import forked  # the child side; imported only here, where a command is forked

    child = ForkServerContext().Process(
        target=forked.run_command,
        args=(command, args, os.getcwd(), dict(os.environ), None, False),
        daemon=False,
    )
    preparation = {
        "name": child.name,
        "sys_path": sys.path,
        "dir": os.getcwd(),
        "authkey": process.current_process().authkey,
    }
    data = io.BytesIO()
    set_spawning_popen(_PassFds())
    try:
        reduction.dump(preparation, data)
        reduction.dump(child, data)
    finally:
        set_spawning_popen(None)
    status, child_w = os.pipe()
    child_r, data_w = os.pipe()
    devnull = os.open(os.devnull, os.O_WRONLY)  # the server's liveness pipe and resource tracker
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(address)
        # The server keeps child_r and child_w; the child gets the rest (forkserver.get_inherited_fds).
        reduction.sendfds(client, [child_r, child_w, devnull, devnull, 0, 1, 2, lifeline])
    for fd in (child_r, child_w, devnull):
        os.close(fd)
    with open(data_w, "wb") as pipe:
        pipe.write(data.getbuffer())
    return forkserver.read_signed(status), status
