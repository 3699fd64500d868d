"""Run the benchmark suite: ``python -m benchmarks.run [--quick] [--sections train,generation] [--threads N]``.

Writes ``benchmarks/results.md`` (or ``--out``) and the plots under ``plots/`` next to it. The full
suite takes about 20 minutes on 2 cores, ``--quick`` a few. A section that fails is reported in
the notes and the exit status, and the others still run. The ``nanogpt`` section runs nanoGPT's own
train.py from a checkout named by ``NANOGPT_DIR`` (skipped with a note without one; about 20 more
minutes), ``stepcost`` trains attnlab-train and its two references in turns, one process a round (a few minutes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks import (
    attention,
    checkpoint,
    compiled,
    data,
    flex,
    generation,
    mfu,
    nanogpt_run,
    startup,
    step_cost,
    train_step,
)
from benchmarks.common import BENCH_DIR, Row, Settings
from benchmarks.report import plot, write_results
from benchmarks.step_cost import lightning

SECTIONS = {
    "train": train_step,
    "lightning": lightning,
    "generation": generation,
    "attention": attention,
    "compile": compiled,
    "flex": flex,
    "mfu": mfu,
    "startup": startup,
    "data": data,
    "checkpoint": checkpoint,
    "stepcost": step_cost,
    "nanogpt": nanogpt_run,
}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a reduced suite (a few minutes)")
    size.add_argument("--tiny", action="store_true", help="smoke-test sizes: checks the machinery, not speed")
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of: {', '.join(SECTIONS)} (default: all)",
    )
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads (default: all cores)"
    )
    parser.add_argument("--out", type=Path, default=BENCH_DIR, help="folder for results.md and plots/")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory child processes")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections.split(",") if s not in SECTIONS]
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.threads < 1:
        parser.error(f"--threads={args.threads} must be at least 1")
    return args


def run_sections(names: list[str], settings: Settings) -> tuple[list[Row], list[str]]:
    """Rows of every section; a failing section becomes a note and its name is returned."""
    rows, failed = [], []
    for name in names:
        start = time.perf_counter()
        try:
            rows += SECTIONS[name].run(settings)
        except Exception as err:  # one broken section must not lose the others' figures
            traceback.print_exc()
            settings.notes.append(
                f"section {name} failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}"
            )
            failed.append(name)
        print(f"[{name}] done in {time.perf_counter() - start:.0f} s", flush=True)
    return rows, failed


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    for key, value in (
        ("HF_HUB_OFFLINE", "1"),
        ("WANDB_MODE", "offline"),
        ("TRANSFORMERS_VERBOSITY", "error"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):
        os.environ.setdefault(key, value)
    torch.set_num_threads(args.threads)
    size = "quick" if args.quick else "tiny" if args.tiny else "full"
    settings = Settings(size=size, threads=args.threads, out_dir=args.out, memory=not args.no_memory)
    args.out.mkdir(parents=True, exist_ok=True)
    started, clock = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), time.perf_counter()
    rows, failed = run_sections(args.sections.split(","), settings)
    command = "python -m benchmarks.run" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    path = write_results(
        rows, settings, command, started, (time.perf_counter() - clock) / 60, plot(rows, args.out)
    )
    print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
