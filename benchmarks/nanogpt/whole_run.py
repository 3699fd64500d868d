"""nanoGPT's own ``train.py`` against ``attnlab-train experiment=nanogpt_baby``, when
``NANOGPT_DIR`` names a checkout of karpathy/nanoGPT (its code is never part of this repository).

Both train nanoGPT's "baby" CPU configuration on the same Tiny Shakespeare file
(``../shared/data/tinyshakespeare.txt`` or ``$TINYSHAKESPEARE``), each in a fresh process with the
suite's thread count (``OMP_NUM_THREADS``), taking turns:

- nanoGPT: ``train.py config/train_shakespeare_char.py`` with the baby flags of its README
  (experiments/nanogpt_baby/README.md), run from a temporary folder that holds the
  ``data/shakespeare_char`` files its ``prepare.py`` would write (``checkout.write_data``,
  from the same file, so that nothing is downloaded: same character vocabulary, same 90/10 split);
- attnlab: ``attnlab-train experiment=nanogpt_baby`` with the same file, as a user runs it: it
  validates on the whole validation split (145 batches) every 500 steps, 580 batches in all;
- attnlab with nanoGPT's evaluation budget: the same preset, validating every 250 steps on as many
  batches as nanoGPT's ``estimate_loss`` scores in all (it scores 20 training and 20 validation
  batches at steps 0, 250, ..., 2,000: 360 batches; attnlab: 45 validation batches at 250, ..., 2,000).

Three ratios (above 1: attnlab is faster): the whole run's wall time (startup, evaluation and
checkpoints included), nanoGPT ÷ attnlab, for each of the two attnlab runs, and the training
throughput (tokens/s: nanoGPT's median iteration time, attnlab's median logged ``tokens/s``,
validation excluded from both).
"""

from __future__ import annotations

import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, Row, Settings
from benchmarks.nanogpt.checkout import (
    BABY_BATCH,
    BABY_BLOCK,
    BABY_EVAL_ITERS,
    BABY_FLAGS,
    ITERATION,
    VAL_LINE,
    nanogpt_checkout,
    write_data,
)
from benchmarks.startup import train_command

SECTION = "nanoGPT train.py"
ATTNLAB_RATE = re.compile(r"\| tokens/s (\d+) \|")
ATTNLAB_VAL = re.compile(r"^step (\d+)/\d+ \|.* val/loss ([\d.]+)")  # val/* in name order: bpb first


def corpus() -> Path:
    return Path(os.environ.get("TINYSHAKESPEARE", ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"))


def nanogpt_command(checkout: Path, steps: int) -> list[str]:
    return [
        sys.executable,
        str(checkout / "train.py"),
        str(checkout / "config" / "train_shakespeare_char.py"),
        *BABY_FLAGS,
        f"--max_iters={steps}",
        f"--lr_decay_iters={steps}",
        f"--eval_interval={nanogpt_eval_interval(steps)}",
    ]


def nanogpt_eval_interval(steps: int) -> int:
    return max(steps // 8, 1)  # 250 of 2,000 in its config


def nanogpt_eval_budget(steps: int) -> list[str]:
    """Overrides that give attnlab-train nanoGPT's evaluation work: validation at nanoGPT's interval, on
    as many batches in all as nanoGPT's ``estimate_loss`` scores (``eval_iters`` training and as many
    validation batches at steps 0, interval, ..., ``steps``)."""
    every = nanogpt_eval_interval(steps)
    scored = (steps // every + 1) * 2 * BABY_EVAL_ITERS  # nanoGPT: 9 evaluations of 40 batches at 2,000 steps
    return [
        f"trainer.val_every_n_steps={every}",
        f"trainer.limit_val_batches={math.ceil(scored / math.ceil(steps / every))}",
    ]


def attnlab_command(steps: int, run_dir: Path, budget: bool = False) -> list[str]:
    """``attnlab-train experiment=nanogpt_baby`` at ``steps`` steps; ``budget``: with nanoGPT's evaluation work."""
    every = max(steps // 4, 1)  # 500 of 2,000 in the preset
    changes = [] if steps == 2000 else [f"trainer.max_steps={steps}", f"trainer.val_every_n_steps={every}"]
    changes += [] if steps == 2000 else [f"checkpoint.every_n_steps={every}"]
    changes += nanogpt_eval_budget(steps) if budget else []
    return [
        *train_command(),
        "experiment=nanogpt_baby",
        f"data.path={corpus()}",
        *changes,
        f"run_dir={run_dir}",
    ]


def timed(args: list[str], cwd: Path, threads: int) -> tuple[float, str]:
    """Wall seconds of a fresh process and its stdout; a failure raises with its last line."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": str(threads),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
    }
    start = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1][:300]
        raise RuntimeError(f"{Path(args[1]).name} exited {done.returncode}: {last}")
    return seconds, done.stdout


def nanogpt_rate(stdout: str) -> tuple[float, str]:
    """Training tokens/s from the median iteration time, and the last val loss it printed."""
    times = [float(m.group(2)) for m in map(ITERATION.match, stdout.splitlines()) if m and m.group(1) != "0"]
    vals = [loss for _, loss in VAL_LINE.findall(stdout)]
    return BABY_BATCH * BABY_BLOCK / (statistics.median(times) / 1e3), vals[-1] if vals else "?"


def attnlab_rate(stdout: str) -> tuple[float, str]:
    """The median of the logged training tokens/s, and the last val loss."""
    rates = [float(m.group(1)) for m in map(ATTNLAB_RATE.search, stdout.splitlines()) if m]
    vals = [m.group(2) for m in map(ATTNLAB_VAL.match, stdout.splitlines()) if m]
    return statistics.median(rates), vals[-1] if vals else "?"


CONTENDERS = ("nanoGPT", "attnlab", "attnlab, nanoGPT's eval budget")


def one_round(checkout: Path, steps: int, threads: int, order: int) -> dict[str, tuple[float, float, str]]:
    """{contender: (wall seconds, tokens/s, last val loss)} of one turn each."""
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_data(corpus(), work / "data" / "shakespeare_char")
        (work / "configurator.py").symlink_to(checkout / "configurator.py")  # train.py execs it from cwd
        for i, name in enumerate(CONTENDERS[::order]):
            if name == "nanoGPT":
                seconds, out = timed(nanogpt_command(checkout, steps), work, threads)
                found[name] = (seconds, *nanogpt_rate(out))
            else:
                command = attnlab_command(steps, work / f"attnlab{i}", budget=name != "attnlab")
                seconds, out = timed(command, work, threads)
                found[name] = (seconds, *attnlab_rate(out))
            print(f"[nanogpt] {name}: {seconds:.1f} s, {found[name][1]:,.0f} tok/s", flush=True)
    return found


def run(settings: Settings) -> list[Row]:
    checkout = nanogpt_checkout()
    if checkout is None:
        settings.notes.append("nanoGPT train.py: skipped (set NANOGPT_DIR to a checkout of karpathy/nanoGPT)")
        return []
    if not corpus().is_file():
        settings.notes.append(
            f"nanoGPT train.py: skipped (no Tiny Shakespeare at {corpus()}; set TINYSHAKESPEARE)"
        )
        return []
    steps, rounds = settings.pick(full=(2000, 2), quick=(300, 1), tiny=(20, 1))
    rounds_found = [
        one_round(checkout, steps, settings.threads, 1 if r % 2 == 0 else -1) for r in range(rounds)
    ]
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    config = f"baby GPT L4 H4 d128 T{BABY_BLOCK} B{BABY_BATCH}, {steps} steps, Tiny Shakespeare char, {settings.threads} threads"
    budget = " ".join(nanogpt_eval_budget(steps))
    rows = []
    for measure, contender, index, invert in (
        ("whole run wall time, nanoGPT ÷ attnlab (the preset)", "attnlab", 0, True),
        (f"whole run wall time, nanoGPT ÷ attnlab ({budget})", CONTENDERS[2], 0, True),
        ("training tokens/s, attnlab ÷ nanoGPT", "attnlab", 1, False),
    ):
        ratios = [
            (r["nanoGPT"][index] / r[contender][index])
            if invert
            else (r[contender][index] / r["nanoGPT"][index])
            for r in rounds_found
        ]
        last = rounds_found[-1]
        detail = "; ".join(
            f"{name} {last[name][0]:.0f} s, {last[name][1]:,.0f} tok/s, val {last[name][2]}"
            for name in ("nanoGPT", contender)
        )
        rows.append(
            Row(
                SECTION,
                measure,
                config,
                statistics.median(ratios),
                min(ratios),
                max(ratios),
                "×",
                f"{detail}; {rounds} round(s), load {load}",
                1.0,
                "≥ 1×",
            )
        )
    return rows
