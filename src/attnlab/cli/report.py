"""``attnlab-report``: compare the runs of a sweep from their run directories, offline, after the fact.

    attnlab-report multirun/2025-01-01/12-00-00              # report.md, plots/ and runs.csv there
    attnlab-report 'outputs/2025-01-0*/*' --out reports/jan   # runs found by a glob, written elsewhere
    attnlab-report multirun/2025-01-01/12-00-00 --metric val/acc

It prints the tables of ``report.md``: one row per job, and one row per configuration (mean ± std
over seeds) when jobs differ only by seed, and the evaluations made with attnlab-eval.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from attnlab.report import ReportError, read_sweep, write_report
from attnlab.report.lengths import write_length_report
from attnlab.training.files import disk_full_line, is_disk_full
from attnlab.training.signals import interrupted_in_one_line


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attnlab-report",
        description="Tables and plots comparing the runs of a sweep, from their run directories' files.",
    )
    p.add_argument(
        "paths",
        nargs="+",
        help="a sweep directory, run directories, or a glob of them (quoted); searched recursively "
        "for run directories (folders holding config.yaml)",
    )
    p.add_argument(
        "--out", type=Path, help="where report.md, plots/ and runs.csv go (default: the sweep dir)"
    )
    p.add_argument(
        "--metric",
        help="the metric whose best value is reported and plotted (default: each run's task.monitor)",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    """Console script ``attnlab-report`` (also ``python -m attnlab.cli.report``); a signal ends it in
    one line."""
    with interrupted_in_one_line("report"):
        report_command(argv)


def report_command(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s", stream=sys.stderr)
    try:
        sweep = read_sweep(args.paths, metric=args.metric)
        out = args.out or default_out_dir(args.paths, sweep.root)
        command = " ".join(["attnlab-report", *(sys.argv[1:] if argv is None else argv)])
        report = write_report(sweep, out, command=command)
        length_files = write_length_report(args.paths, out)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:
        if is_disk_full(err):
            print(f"error: {disk_full_line(err, Path(args.out or '.'))}", file=sys.stderr)
            sys.exit(1)
        print(
            f"error: {err.filename or args.out or '.'}: cannot be written ({err.strerror})", file=sys.stderr
        )
        sys.exit(2)
    for title, table in report.tables.items():
        print(f"\n{title}\n\n{table.to_markdown(index=False)}")
    print(f"\nreport: {report.markdown}\ntable:  {report.csv}")
    if length_files:  # evaluations of eval.lengths=[...]: exact match by length, per task
        print(f"lengths: {length_files[0]} and {len(length_files) - 1} more in {length_files[0].parent}")
    print(f"plots:  {len(report.plots)} in {report.plots[0].parent}" if report.plots else "plots:  none")


def default_out_dir(paths: list[str], root: Path) -> Path:
    """The one directory given (a sweep), else the folder the runs have in common."""
    if len(paths) == 1 and Path(paths[0]).is_dir():
        return Path(paths[0])
    return root


if __name__ == "__main__":
    main()
