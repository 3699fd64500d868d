"""``python tests/cpu_seconds.py pytest -q tests/cli/test_train_ddp.py``: run a command and print the CPU
seconds (user + sys) of it and of every process it started, orphans included, with its wall time.

The suite's cost on a shared machine is its CPU time, not its wall time. ``/usr/bin/time`` counts only
the children that their parents waited for, and misses what the tests start and leave to others: the
rank that Lightning starts and never waits for, torchrun's workers, wandb's service (test_train_ddp.py:
28.7 CPU-s by /usr/bin/time, 66.5 here, when it had two runs of forked processes). This process becomes a
child subreaper (Linux ``prctl``), so those orphans are reparented to it, reaped here, and counted in
``RUSAGE_CHILDREN``.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def reap_orphans() -> None:
    """Wait for every process reparented here, so its CPU time is counted."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def run_reaping_orphans(command: list[str]) -> int:
    """Run ``command``; its exit status. Orphans reparented here meanwhile are reaped as they end: a
    zombie left in a process group keeps ``os.killpg(group, 0)`` succeeding, and the tests that wait
    for a killed group to be gone (``train_cli.wait_until_group_is_gone``) would wait out their timeout."""
    child = subprocess.Popen(command)
    while True:
        pid, status = os.wait()
        if pid == child.pid:
            return os.waitstatus_to_exitcode(status)


def main(command: list[str]) -> int:
    """Run ``command``; its exit status, after printing the CPU and wall seconds to stderr."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    start = time.monotonic()
    status = run_reaping_orphans(command)
    wall = time.monotonic() - start
    reap_orphans()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    print(
        f"cpu {cpu:.1f} s (user {usage.ru_utime:.1f}, sys {usage.ru_stime:.1f}), wall {wall:.1f} s",
        file=sys.stderr,
    )
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
