"""A resume in place drops from the earlier CSV logs the rows it logs again: after a
kill, the old ``metrics.csv`` and the resumed one overlapped for the steps between the checkpoint and
the kill."""

from __future__ import annotations

import csv
from pathlib import Path

from attnlab.training.loggers import trim_csv_logs

# Lightning's rows: a training step's ``step`` is the optimizer steps done before it, a validation's the
# steps done. Checkpoint at step 3 (after its validation), killed during step 6.
ROWS = [
    {"step": "2", "train/loss": "4.1", "val/loss": ""},
    {"step": "3", "train/loss": "", "val/loss": "3.9"},  # step 3's validation: the checkpoint holds it
    {"step": "3", "train/loss": "3.8", "val/loss": ""},  # step 4: done again by the resume
    {"step": "4", "train/loss": "3.7", "val/loss": ""},
]


def test_the_rows_after_the_checkpoint_go_and_the_rest_stay(tmp_path: Path) -> None:
    (tmp_path / "csv").mkdir()
    with open(tmp_path / "csv" / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "train/loss", "val/loss"])
        writer.writeheader()
        writer.writerows(ROWS)
    trim_csv_logs(tmp_path / "csv", resume_step=3)
    with open(tmp_path / "csv" / "metrics.csv", newline="") as f:
        assert list(csv.DictReader(f)) == ROWS[:2]
