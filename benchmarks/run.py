"""Run the benchmark suite: ``python -m benchmarks.run [--quick] [--sections train,generation] [--threads N]``.

Saves each section's rows to ``benchmarks/saved/<section>.json`` (or under ``--out``), then writes
``results.md`` and the plots under ``plots/`` from every saved section, so a section not run again
keeps its last figures. The full suite takes about 20 minutes on 2 cores, ``--quick`` a few. A
section that fails is reported in the exit status and keeps its last saved results; the others
still run. The ``nanogpt`` section runs nanoGPT's own
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
    mixers,
    startup,
    step_cost,
    train_step,
)
from benchmarks.common import BENCH_DIR, Settings, machine, versions
from benchmarks.figures import plot
from benchmarks.nanogpt import whole_run
from benchmarks.report import write_results
from benchmarks.saved import SectionResult, load_all, save
from benchmarks.step_cost import lightning

SECTIONS = {
    "train": train_step,
    "lightning": lightning,
    "generation": generation,
    "attention": attention,
    "compile": compiled,
    "flex": flex,
    "mixers": mixers,
    "mfu": mfu,
    "startup": startup,
    "data": data,
    "checkpoint": checkpoint,
    "stepcost": step_cost,
    "nanogpt": whole_run,
}
TITLES = {  # what each section measures: the headings of results.md
    "train": "Training step against Hugging Face and nanoGPT",
    "lightning": "Lightning and the task module over a bare loop",
    "generation": "Greedy decoding against Hugging Face and the memory-bandwidth floor",
    "attention": "Causal self-attention, SDPA against explicit",
    "compile": "torch.compile of the training step",
    "flex": "FlexAttention against SDPA",
    "mixers": "Mixers: decode cache per token and training-step cost against softmax attention",
    "mfu": "Model FLOPs utilisation of the training step",
    "startup": "Seconds from invocation to the first optimizer step",
    "data": "Batches from the data module",
    "checkpoint": "The step that writes a checkpoint",
    "stepcost": "attnlab-train's own cost per step",
    "nanogpt": "nanoGPT's train.py against attnlab-train, the whole run",
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
    parser.add_argument(
        "--write-only", action="store_true", help="run no section: write results.md from the saved ones"
    )
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections.split(",") if s not in SECTIONS]
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.threads < 1:
        parser.error(f"--threads={args.threads} must be at least 1")
    return args


def run_section(name: str, settings: Settings, command: str) -> SectionResult | None:
    """One section's rows and notes, saved under ``settings.out_dir`` when there are rows; None if it
    failed (the failure is printed, and the section keeps its last saved results)."""
    started, clock = now(), time.perf_counter()
    first_note = len(settings.notes)
    try:
        rows = SECTIONS[name].run(settings)
    except Exception as err:  # one broken section must not lose the others' figures
        traceback.print_exc()
        print(f"section {name} failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}", flush=True)
        return None
    minutes = (time.perf_counter() - clock) / 60
    print(f"[{name}] done in {60 * minutes:.0f} s", flush=True)
    result = SectionResult(
        name,
        started,
        command,
        machine(),
        versions(),
        settings.threads,
        settings.size,
        minutes,
        rows,
        settings.notes[first_note:],
    )
    if rows:  # a section skipped (no nanoGPT checkout, too small a size) keeps its last results
        save(result, settings.out_dir)
    for note in result.notes:
        print(f"[{name}] {note}", flush=True)
    return result


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


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
    command = "python -m benchmarks.run" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    names = [] if args.write_only else args.sections.split(",")
    done = {name: run_section(name, settings, command) for name in names}
    failed = [name for name, result in done.items() if result is None]
    results = load_all(args.out, list(SECTIONS))
    plots = plot([row for result in results for row in result.rows], args.out)
    ran = [name for name, result in done.items() if result is not None and result.rows]
    path = write_results(results, TITLES, args.out, command=command, written=now(), ran=ran, plots=plots)
    print(
        f"wrote {path}" + (f"; failed: {', '.join(failed)} (their last saved results kept)" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
