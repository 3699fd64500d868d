"""A Hydra job's end: a failed job's one line (its traceback in the run's log file), and a multirun's
table of its jobs and report of the failed ones, printed when the last job is done."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from attnlab.cli.hydra.hydra_shims import launcher_logger
from attnlab.run.bad_input import error_line, full_traceback
from attnlab.training.console import log_to_file
from attnlab.training.files import disk_full_line, is_disk_full

failed_jobs: list[str] = []  # one line per job of this multirun that failed
job_rows: list[dict[str, str]] = []  # one row per job of this multirun, finished or failed: the final table
tabled: set[bool] = set()  # {True} once a command asked for the table (``one_line_per_job``)


def run_job(job: Callable[[], float]) -> float | None:
    """Run one Hydra job; if it fails, its traceback goes to the run's log file and the console gets one
    line. A single run then exits with status 1; in a multirun the job is reported and returns None (no
    value: Optuna records the trial as failed), so the sweep goes on and the other jobs keep their results.
    """
    try:
        return job()
    except Exception as err:
        if full_traceback:
            raise
        log_traceback(err)
        hc = HydraConfig.get()
        where = f" (traceback in {Path(hc.runtime.output_dir) / f'{hc.job.name}.log'})"
        reason = error_line(err)
        if is_disk_full(err):  # the log file could not take the traceback either
            reason, where = disk_full_reason(err, Path(hc.runtime.output_dir)), ""
        if hc.mode != RunMode.MULTIRUN:
            print(f"error: {reason}{where}", file=sys.stderr)
            tell_torchrun(reason)
            sys.exit(1)
        message = f"job {hc.job.num} ({' '.join(hc.overrides.task)}) failed: {reason}{where}"
        print(f"error: {message}", file=sys.stderr)
        failed_jobs.append(message)
        if jobs_in_a_table():
            from attnlab.training.names import run_name

            name = run_name(None, list(hc.overrides.task), str(hc.job.num), multirun=True)
            record_job(
                {"job": str(hc.job.num), "run": name, "status": "failed", "folder": hc.runtime.output_dir}
            )
        return None


def tell_torchrun(reason: str) -> None:
    """Under torchrun, a failed process's one line goes into the error file its agent reads, so that the
    agent's report names the cause instead of a link on how to see a traceback."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        data = {"message": {"message": reason, "extraInfo": {"timestamp": str(int(time.time()))}}}
        with suppress(OSError):
            Path(path).write_text(json.dumps(data))


class DropJobLaunchLines(logging.Filter):
    """Drops Hydra's line per job launched (``#3 : pos=rope seed=2``), for a command whose jobs print
    one line each when they end (``attnlab-train -m``); its "Launching N jobs" line stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("\t#")


def one_line_per_job() -> None:
    """A multirun's jobs announce themselves when they end (``record_job``), not when Hydra launches
    them (its launcher's lines are dropped where ``cli.hydra.hydra_shims`` knows its logger), and the
    multirun ends with their table (failed jobs included)."""
    tabled.add(True)
    name = launcher_logger()
    launcher = logging.getLogger(name) if name else None
    if launcher is not None and not any(isinstance(f, DropJobLaunchLines) for f in launcher.filters):
        launcher.addFilter(DropJobLaunchLines())


def jobs_in_a_table() -> bool:
    """Whether this command's multirun jobs end in a table (``one_line_per_job``)."""
    return bool(tabled)


def record_job(row: dict[str, str]) -> None:
    """A row of the table a multirun prints when its last job is done (``job_table``)."""
    job_rows.append(row)


def job_table(rows: list[dict[str, str]]) -> str:
    """``rows`` as aligned text columns under a header: every column any row has, in order of appearance."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [columns, *([row.get(c, "") for c in columns] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells)


def disk_full_reason(err: OSError, run_dir: Path) -> str:
    """What did not fit where: the file and the space it needed (DiskFullError says it), else the file."""
    return disk_full_line(err, run_dir)


def log_traceback(err: BaseException) -> None:
    """Write the traceback of ``err`` to the log files only (the console gets one line)."""
    log_to_file(logging.ERROR, "the run failed:\n%s", "".join(traceback.format_exception(err)))
