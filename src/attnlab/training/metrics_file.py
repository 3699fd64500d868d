"""``metrics.jsonl``: every value a run logs, in a file of the run's own, whatever loggers it uses.

One JSON object per line, ``{"step": <optimizer steps done>, "time_s": <seconds of fit>, "<metric>": value}``,
for each logged training step (train/loss, lr, throughput) and each validation or test result. Lines
are appended and flushed one by one, so a killed run keeps what it logged. A resumed run starts from
the lines of the checkpoint's run up to the checkpoint's step (in place: the file itself, beyond that
step dropped; into a new directory: a copy of them), so its file holds every step once, from the first.
attnlab-report reads it (``attnlab.report.runs.read_metrics``).
"""

from __future__ import annotations

import json
import math
import time
from argparse import Namespace
from pathlib import Path
from typing import IO, Any

import pytorch_lightning as pl
from pytorch_lightning.loggers import Logger
from pytorch_lightning.utilities import rank_zero_only

from attnlab.schema.rundir import METRICS_FILE
from attnlab.training.files import disk_full, is_disk_full, write_atomically


class MetricsFileLogger(Logger):
    """A Lightning logger writing ``<run_dir>/metrics.jsonl``; only rank 0 writes.

    ``resume_step``: the global step of the checkpoint a run resumes from (None for a run that starts
    afresh, which replaces any file there); ``previous``: the run directory that checkpoint belongs to
    (default ``run_dir``: a resume in place), whose lines up to that step the file starts with.
    ``trainer``, set once the trainer exists, gives the step written: its ``global_step``, the count of
    optimizer steps done, as in checkpoint names (Lightning's own logging step lags it by one during fit).
    """

    def __init__(self, run_dir: Path, resume_step: int | None = None, previous: Path | None = None) -> None:
        super().__init__()
        self.path = Path(run_dir) / METRICS_FILE
        self.resume_step = resume_step
        self.previous = Path(previous) / METRICS_FILE if previous is not None else self.path
        self.trainer: pl.Trainer | None = None
        self._file: IO[str] | None = None
        self._started = False
        self._start = time.monotonic()
        self.last_time_s: float | None = None  # the time_s of the last line written (rank 0)

    @property
    def name(self) -> str:
        return "metrics_file"

    @property
    def version(self) -> str:
        return ""

    @property
    def save_dir(self) -> str:
        return str(self.path.parent)

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        """Nothing to write: the run's ``config.yaml`` holds the whole config."""

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if self._file is None:
            self._file = self._open()
        record: dict[str, Any] = {
            "step": self.trainer.global_step if self.trainer is not None else step,
            "time_s": round(time.monotonic() - self._start, 3),
        }
        record.update((k, _number(v)) for k, v in metrics.items() if k != "epoch")
        self.last_time_s = record["time_s"]
        line = json.dumps(record) + "\n"
        try:
            self._file.write(line)
            self._file.flush()
        except OSError as err:  # a full disk, or the file size limit: one error naming the file
            if is_disk_full(err):
                raise disk_full(self.path, len(line), err.errno) from None
            raise

    def _open(self) -> IO[str]:
        """The file, opened for appending. The first time, it is written anew with only the lines a
        resumed run keeps (fit and test each end with ``finalize``; the test appends to what the fit
        wrote), and the clock continues from the last kept line, so ``time_s`` counts the time of the
        whole run."""
        if not self._started:
            kept = kept_lines(self.previous, self.resume_step)
            write_atomically(self.path, "".join(kept))
            if kept:
                self._start -= json.loads(kept[-1]).get("time_s", 0.0)
            self._started = True
        return open(self.path, "a", encoding="utf-8")

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def kept_lines(path: Path, resume_step: int | None) -> list[str]:
    """The lines of ``path`` that a run resuming from ``resume_step`` keeps: those up to that step, but
    for test results (a finished run's: the resumed run tests when it ends); none for a run that starts
    afresh, and none that cannot be read, like a line cut by a kill."""
    if resume_step is None or not path.is_file():
        return []
    kept = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                record = json.loads(line)
                step = record.get("step")
            except (json.JSONDecodeError, AttributeError):
                continue
            is_test = any(key.startswith("test/") for key in record)
            if isinstance(step, int) and step <= resume_step and not is_test:
                kept.append(line if line.endswith("\n") else line + "\n")
    return kept


def _number(value: Any) -> float | None:
    """A logged value as JSON allows it: NaN and infinities (a diverged loss) become null."""
    value = float(value)
    return value if math.isfinite(value) else None
