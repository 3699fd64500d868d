"""attnlab-prepare's tokenising processes: they ignore the signals the parent answers (a terminal or a
scheduler signals the whole process group), so that only the parent decides, and end at once with
SIGKILL; one that died is one line naming it; signals held while processes start are handled after."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from attnlab.data.token_workers import (
    PARENT_SIGNALS,
    Worker,
    encode_documents,
    signals_held,
    start_workers,
)
from token_corpus import documents, write_tokenizer

DOCS = documents(20, seed=3)


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("tokenizer") / "tokenizer.json", DOCS)


def encoded_here(tokenizer_file: Path, job: tuple) -> tuple:
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.encode_special_tokens = True
    return encode_documents(tokenizer, job)


def test_a_worker_ignores_the_parents_signals_and_ends_at_once_when_killed(tokenizer_file: Path) -> None:
    """Sent every signal the parent answers (before it started serving, or after: either way), it
    still encodes a job as this process does; ended, it died of SIGKILL."""
    started: list[Worker] = []
    try:
        start_workers(tokenizer_file, 1, started)
        (worker,) = started
        for signum in PARENT_SIGNALS:
            os.kill(worker.process.pid, signum)
        job = (DOCS, 0, "uint16")
        worker.send(job)
        result = worker.result()
    finally:
        for each in started:
            each.end()
    for got, expected in zip(result, encoded_here(tokenizer_file, job), strict=True):
        np.testing.assert_array_equal(got, expected)
    assert worker.process.exitcode == -signal.SIGKILL


def test_a_worker_that_died_is_one_line_naming_it(tokenizer_file: Path) -> None:
    worker = Worker(tokenizer_file)
    try:
        os.kill(worker.process.pid, signal.SIGKILL)  # as the kernel ends a process for memory
        with pytest.raises(ChildProcessError) as died:
            worker.send((DOCS * 500, 0, "uint16"))  # more than a pipe holds: the send finds it dead
            worker.result()
    finally:
        worker.end()
    assert str(died.value) == (
        f"a tokenising process (pid {worker.process.pid}) ended with exit status -9; run the same "
        "attnlab-prepare again to continue"
    )


def test_a_signal_while_processes_start_is_handled_once_they_have_started() -> None:
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        with signals_held():
            os.kill(os.getpid(), signal.SIGUSR1)
            held = list(received)
        assert (held, received) == ([], [signal.SIGUSR1])
    finally:
        signal.signal(signal.SIGUSR1, previous)
