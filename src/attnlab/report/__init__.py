"""attnlab-report: compare the runs of a sweep from their run directories' files alone.

    sweep = read_sweep(["multirun/2025-01-01/12-00-00"])   # one pandas DataFrame per kind of record
    report = write_report(sweep, sweep.root)                # report.md, plots/*.png, runs.csv

No torch, Lightning or Hydra: the files of a run directory (``docs/run-directory.md``) are all it reads.
"""

from attnlab.report.runs import ReportError, find_run_dirs, read_run
from attnlab.report.sweep import Sweep, read_sweep
from attnlab.report.write import Report, write_report

__all__ = ["Report", "ReportError", "Sweep", "find_run_dirs", "read_run", "read_sweep", "write_report"]
