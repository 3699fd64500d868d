"""``attnlab-prepare``'s tokenising processes: spawned interpreters, each with a pipe of its own and one
tokenizer, the jobs dealt out to them in turn and their results taken back in the same order.

Only the parent process decides what a signal does. Ctrl-C in a terminal, a scheduler and a closed
terminal signal the whole process group; a worker ignores SIGINT, SIGTERM, SIGHUP and SIGUSR1, the
parent answers (``attnlab.training.signals``) and ends its workers with SIGKILL. A worker can be killed
at any point because it shares no lock with the parent: a ``multiprocessing.Pool`` worker killed while
it waits for a task keeps its queue's lock, and the pool's ``terminate`` waits for that lock forever.
The signals are held back while the workers start (``signals_held``), so that none lands before they
ignore them.

multiprocessing's resource tracker (started with the first spawned process, and in the same group)
ignores SIGINT and SIGTERM but not SIGHUP; it is started with SIGHUP blocked, for its whole life,
since a tracker ended by SIGHUP is started again by the next process that needs it, which then prints
``KeyError`` tracebacks for what the first one had been told.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import get_context, resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import numpy as np

# the signals attnlab's commands answer (attnlab.training.signals.SIGNALS): the parent's alone
PARENT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
Job = tuple[list[str], int, str]  # the documents' texts, the end-of-text id, the token dtype's name
Encoded = tuple[np.ndarray, np.ndarray, np.ndarray]


@contextmanager
def signals_held() -> Iterator[None]:
    """``PARENT_SIGNALS`` held back while processes start, then handled: blocked in this thread (a
    process started now inherits the mask, so it cannot die of one before it ignores them) and, where
    another thread of this process takes one, noted by a stand-in handler (the real one would raise in
    the middle of a start, leaving a process nobody ends) and raised again at the end."""
    noted: list[int] = []
    replaced = {}
    if threading.current_thread() is threading.main_thread():  # where handlers can be set
        replaced = {s: signal.signal(s, lambda signum, _: noted.append(signum)) for s in PARENT_SIGNALS}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, PARENT_SIGNALS)
    try:
        yield
    finally:
        for signum, handler in replaced.items():
            signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # one blocked meanwhile is handled here
        if noted:
            signal.raise_signal(noted[0])


# -- in a worker ------------------------------------------------------------------------------------


def serve(connection: Connection, tokenizer_file: str) -> None:
    """A worker's life: the parent's signals ignored, then each job received encoded and sent back, until
    the parent closes its end (or dies)."""
    for signum in PARENT_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, PARENT_SIGNALS)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # single-threaded: the processes are the parallelism
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_file)
    tokenizer.encode_special_tokens = True  # "<|endoftext|>" in a text is text, not the token
    while True:
        try:
            job = connection.recv()
        except (EOFError, OSError):
            return
        try:
            result: Encoded | Exception = encode_documents(tokenizer, job)
        except Exception as err:  # the parent raises it
            result = err
        try:
            connection.send(result)
        except OSError:
            return


def encode_documents(tokenizer: object, job: Job) -> Encoded:
    """Each document's tokens behind the end-of-text token, all in one array; their lengths; their UTF-8 bytes."""
    texts, eot, dtype = job
    encoded = tokenizer.encode_batch(texts, add_special_tokens=False)  # type: ignore[attr-defined]
    lengths = np.array([len(e.ids) + 1 for e in encoded], dtype=np.int64)
    tokens = np.empty(int(lengths.sum()), dtype=dtype)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    tokens[starts] = eot
    for start, e in zip(starts, encoded, strict=True):
        tokens[start + 1 : start + 1 + len(e.ids)] = e.ids
    text_bytes = np.array([len(t.encode("utf-8")) for t in texts], dtype=np.int64)
    return tokens, lengths, text_bytes


# -- in the parent ----------------------------------------------------------------------------------


class Worker:
    """One tokenising process, started, and the parent's end of its pipe."""

    def __init__(self, tokenizer_file: Path) -> None:
        parent_end, child_end = get_context("spawn").Pipe()
        self.connection = parent_end
        self.process: BaseProcess = get_context("spawn").Process(
            target=serve, args=(child_end, str(tokenizer_file)), daemon=True, name="attnlab-prepare-worker"
        )
        self.process.start()
        child_end.close()

    def send(self, job: Job) -> None:
        try:
            self.connection.send(job)
        except OSError:  # its end is closed: it died
            raise self.died() from None

    def result(self) -> Encoded:
        """The result of the job sent last."""
        try:
            result = self.connection.recv()
        except (EOFError, OSError):
            raise self.died() from None
        if isinstance(result, Exception):
            raise result
        return result

    def died(self) -> ChildProcessError:
        """What to raise for a worker that ended by itself (killed by the kernel for memory, say)."""
        self.process.join()
        return ChildProcessError(
            f"a tokenising process (pid {self.process.pid}) ended with exit status "
            f"{self.process.exitcode}; run the same attnlab-prepare again to continue"
        )

    def end(self) -> None:
        """SIGKILL, whatever it is doing (it holds nothing the parent needs), and wait for it."""
        self.process.kill()
        self.process.join()
        self.connection.close()


def start_workers(tokenizer_file: Path, count: int, started: list[Worker]) -> None:
    """``count`` workers appended to ``started``, which the caller ends whatever is raised here (a
    signal held meanwhile included). The resource tracker is started first: starting it lets SIGINT
    and SIGTERM through again (``resource_tracker.ensure_running``), and the workers must start with
    them held."""
    with signals_held():
        resource_tracker.ensure_running()  # SIGHUP blocked in it for life (see the module's docstring)
    with signals_held():
        for _ in range(count):
            started.append(Worker(tokenizer_file))


def encoded_in_order(
    jobs: Iterator[tuple[list[int], Job]], tokenizer_file: Path, workers: int
) -> Iterator[tuple[list[int], Encoded]]:
    """The jobs' results in submission order. Job k goes to worker k % workers once that worker's
    previous result is taken: one job per worker in flight, so memory stays flat on a corpus of any
    size and no worker is sent a job while it is still sending a result. The workers are ended when
    this generator ends or is closed (``contextlib.closing``), and on any exception, a signal's included."""
    started: list[Worker] = []
    pending: deque[tuple[Worker, list[int]]] = deque()  # in submission order, one job per worker at most
    try:
        start_workers(tokenizer_file, workers, started)
        for k, (indices, job) in enumerate(jobs):
            worker = started[k % workers]
            taken = None
            if len(pending) == workers:  # the oldest job is this worker's previous one
                _, taken_indices = pending.popleft()
                taken = taken_indices, worker.result()
            worker.send(job)
            pending.append((worker, indices))
            if taken is not None:
                yield taken
        while pending:
            worker, indices = pending.popleft()
            yield indices, worker.result()
    finally:
        for worker in started:
            worker.end()
