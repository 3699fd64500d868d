"""``in_process.restored``: what a command run in the test's process changes is put back after it, so
that the next command (in this process or started as one, with this environment) does not inherit it."""

from __future__ import annotations

import builtins
import logging
import os
import signal
from pathlib import Path

import pytest
from in_process import restored


def test_the_environment_cwd_handlers_and_replaced_functions_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTNLAB_TEST_KEPT", "before")
    cwd, real_open, real_replace = os.getcwd(), builtins.open, os.replace
    handler = signal.getsignal(signal.SIGTERM)
    with restored():
        os.environ["ATTNLAB_RUN_DIR"] = str(tmp_path)  # what a run exports for its ranks
        os.environ["ATTNLAB_TEST_KEPT"] = "changed"
        os.chdir(tmp_path)
        signal.signal(signal.SIGTERM, lambda *_: None)
        builtins.open = lambda *args, **kwargs: None  # what fault_injection's callbacks do
        os.replace = lambda *args: None
    assert "ATTNLAB_RUN_DIR" not in os.environ and os.environ["ATTNLAB_TEST_KEPT"] == "before"
    assert os.getcwd() == cwd and signal.getsignal(signal.SIGTERM) is handler
    assert builtins.open is real_open and os.replace is real_replace


def test_a_log_file_left_on_the_root_logger_is_closed_and_removed(tmp_path: Path) -> None:
    root = logging.getLogger()
    kept = logging.StreamHandler()
    root.addHandler(kept)
    try:
        with restored():
            left = logging.FileHandler(tmp_path / "train.log")
            root.addHandler(left)
        assert left not in root.handlers and left.stream is None  # closed: the file can go
        assert kept in root.handlers  # not the body's: left alone
    finally:
        root.removeHandler(kept)


def test_what_the_body_raises_passes_through_after_the_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNLAB_TEST_RAISED", raising=False)
    with pytest.raises(RuntimeError, match="the run failed"), restored():
        os.environ["ATTNLAB_TEST_RAISED"] = "1"
        raise RuntimeError("the run failed")
    assert "ATTNLAB_TEST_RAISED" not in os.environ
