"""``attnlab-report``: compare the runs of a sweep from their run directories, offline, after the fact.

    attnlab-report multirun/2025-01-01/12-00-00              # report.md, plots/ and runs.csv there
    attnlab-report 'outputs/2025-01-0*/*' --out reports/jan   # runs found by a glob, written elsewhere
    attnlab-report multirun/2025-01-01/12-00-00 --metric val/acc
    attnlab-report multirun/2025-01-01/12-00-00 --baseline rope --budget flops --level 0.01

It prints the tables of ``report.md``: one row per job, and one row per configuration (mean ± std
over seeds) when jobs differ only by seed, and the evaluations made with attnlab-eval; where seeds
are swept, each configuration against a baseline (difference, interval, test, verdict), at a matched
budget of compute if asked, and the time to a target of runs that had one (docs/comparing-runs.md).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from attnlab.cli.hydra.one_line_parser import OneLineParser
from attnlab.report import ReportError, read_sweep, write_report
from attnlab.report.decisions import Decisions
from attnlab.report.lengths import write_length_report
from attnlab.report.significance import LEVEL
from attnlab.training.files import disk_full_line, is_disk_full
from attnlab.training.signals import interrupted_in_one_line


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
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
    p.add_argument(
        "--baseline",
        help="the configuration every other is compared with: its label as the tables show it "
        "(model.pos.name=rope), or parts only it has, a key=value or a value alone (rope); default: "
        "the first configuration",
    )
    p.add_argument(
        "--level",
        type=level,
        default=LEVEL,
        help=f"the significance level of the comparisons, after Holm's correction (default: {LEVEL})",
    )
    p.add_argument(
        "--budget",
        help="compare at a matched budget instead of the final values: step|tokens|flops|time=<value> "
        "(tokens=2e6), or the axis alone for the most every run reached; each run's curve is "
        "interpolated, and a run short of the budget is named and left out",
    )
    return p


def level(text: str) -> float:
    """``--level``: a probability strictly between 0 and 0.5."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 0.5:
        raise argparse.ArgumentTypeError(f"{text}: a significance level between 0 and 0.5, as 0.05")
    return value


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
        decisions = Decisions(args.baseline, args.level, args.budget)
        report = write_report(sweep, out, command=command, decisions=decisions)
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
    for path in report.decision_csvs:
        print(f"table:  {path}")
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
