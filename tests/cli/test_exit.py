"""attnlab's commands exit without the interpreter's last full garbage collections."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import processes

PROGRAM = """
import atexit, gc
atexit.register(lambda: print("registered before:", gc.get_freeze_count() > 0))
from attnlab.cli.hydra.app import freeze_heap_at_exit
before = atexit._ncallbacks()
freeze_heap_at_exit()
freeze_heap_at_exit()
print("handlers added:", atexit._ncallbacks() - before)
atexit.register(lambda: print("registered after:", gc.get_freeze_count() > 0))
"""


@pytest.mark.process_contract("interpreter")
def test_the_heap_is_frozen_once_the_handlers_registered_after_it_have_run(tmp_path: Path) -> None:
    """Exit handlers run last-registered first: wandb's and the jobs' (registered later) still see the
    collector working; only what runs after them, the interpreter's finalisation, finds it frozen."""
    done = processes.run([sys.executable, "-c", PROGRAM], tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "handlers added: 1",
        "registered after: False",
        "registered before: True",
    ]
