"""What a command run in the test's own process may leave behind, put back after it: the tests of
tests/cli that run ``attnlab-train`` in this process (``train_cli.command_here``, ``attnlab.run``)
beside the process contracts that start one (``train_cli.cli``).

A process ends and its changes go with it; a command run here leaves them to the next test unless they
are undone: the environment variables a run exports for the ranks it launches (``ATTNLAB_RUN_DIR``, the
swept keys, Lightning's ``MASTER_PORT``/``WORLD_SIZE``, wandb's settings) would be inherited by the
next command a test starts as a process; the fault-injection callbacks (tests/cli/fault_injection.py)
replace ``open``, ``os.replace``, ``os.remove`` and ``os.unlink`` when they are built; a strategy that
shards the model initialises torch.distributed's default group; a command may change the working
directory or the signal handlers; Hydra's job logging leaves the job's ``train.log`` open on the root
logger until the next job configures logging (a run on a small disk could not be unmounted)."""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import signal
from collections.abc import Iterator

import pytest

# What tests/cli/fault_injection.py's callbacks replace when they are built.
REPLACED_BY_FAULTS = [(builtins, "open"), (os, "replace"), (os, "remove"), (os, "unlink")]
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@contextlib.contextmanager
def restored() -> Iterator[None]:
    """Run the body (commands in this process), then put back the environment, the working directory,
    the signal handlers, the functions the fault-injection callbacks replace, and no default process
    group of torch.distributed (destroyed where the body made one); the log files the body opened on the
    root logger are closed and taken off it."""
    import torch.distributed as dist

    environ, cwd = dict(os.environ), os.getcwd()
    handlers = {signum: signal.getsignal(signum) for signum in SIGNALS}
    had_group = dist.is_available() and dist.is_initialized()
    root, handlers_before = logging.getLogger(), set(logging.getLogger().handlers)
    with pytest.MonkeyPatch.context() as patch:
        for owner, name in REPLACED_BY_FAULTS:  # set to itself: undone to the original on exit
            patch.setattr(owner, name, getattr(owner, name))
        try:
            yield
        finally:
            for handler in [h for h in root.handlers if h not in handlers_before]:
                if isinstance(handler, logging.FileHandler):
                    root.removeHandler(handler)
                    handler.close()
            if not had_group and dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
            os.chdir(cwd)
            for signum, handler in handlers.items():
                if handler is not None:  # None: a handler installed outside Python, left as it is
                    signal.signal(signum, handler)
            os.environ.clear()
            os.environ.update(environ)
