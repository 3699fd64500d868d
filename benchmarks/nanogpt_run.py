"""nanoGPT's own ``train.py`` against ``attnlab-train experiment=nanogpt_baby`` (issue 12), when
``NANOGPT_DIR`` names a checkout of karpathy/nanoGPT (its code is never part of this repository).

Both train nanoGPT's "baby" CPU configuration on the same Tiny Shakespeare file
(``../shared/data/tinyshakespeare.txt`` or ``$TINYSHAKESPEARE``), each in a fresh process with the
suite's thread count (``OMP_NUM_THREADS``), taking turns:

- nanoGPT: ``train.py config/train_shakespeare_char.py`` with the baby flags of its README
  (experiments/nanogpt_baby/README.md), run from a temporary folder that holds the
  ``data/shakespeare_char`` files its ``prepare.py`` would write (``gpu_recipe.write_nanogpt_data``,
  from the same file, so that nothing is downloaded: same character vocabulary, same 90/10 split);
- attnlab: ``attnlab-train experiment=nanogpt_baby`` with the same file, as a user runs it.

Two ratios, nanoGPT ÷ attnlab (above 1: attnlab is faster): the whole run's wall time (startup,
evaluation and checkpoints included) and the training throughput (tokens/s: nanoGPT's median
iteration time, attnlab's median logged ``tokens/s``, validation excluded from both).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, Row, Settings
from benchmarks.gpu_recipe import VAL_LINE, write_nanogpt_data
from benchmarks.startup import train_command

SECTION = "nanoGPT train.py"
BATCH, BLOCK = 12, 64
BABY_FLAGS = [
    "--device=cpu",
    "--compile=False",
    "--eval_iters=20",
    "--log_interval=1",
    f"--block_size={BLOCK}",
    f"--batch_size={BATCH}",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--dropout=0.0",
]
ITERATION = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms")
ATTNLAB_RATE = re.compile(r"\| tokens/s (\d+) \|")
ATTNLAB_VAL = re.compile(r"^step (\d+)/\d+ \| val/loss ([\d.]+)")


def corpus() -> Path:
    return Path(os.environ.get("TINYSHAKESPEARE", ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"))


def nanogpt_dir() -> Path | None:
    """The nanoGPT checkout named by ``NANOGPT_DIR``, if it has train.py."""
    found = os.environ.get("NANOGPT_DIR")
    return Path(found) if found and (Path(found) / "train.py").is_file() else None


def nanogpt_command(checkout: Path, steps: int) -> list[str]:
    return [
        sys.executable,
        str(checkout / "train.py"),
        str(checkout / "config" / "train_shakespeare_char.py"),
        *BABY_FLAGS,
        f"--max_iters={steps}",
        f"--lr_decay_iters={steps}",
        f"--eval_interval={max(steps // 8, 1)}",  # 250 of 2,000 in its config
    ]


def attnlab_command(steps: int, run_dir: Path) -> list[str]:
    every = max(steps // 4, 1)  # 500 of 2,000 in the preset
    changes = [] if steps == 2000 else [f"trainer.max_steps={steps}", f"trainer.val_every_n_steps={every}"]
    changes += [] if steps == 2000 else [f"checkpoint.every_n_steps={every}"]
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
    return BATCH * BLOCK / (statistics.median(times) / 1e3), vals[-1] if vals else "?"


def attnlab_rate(stdout: str) -> tuple[float, str]:
    """The median of the logged training tokens/s, and the last val loss."""
    rates = [float(m.group(1)) for m in map(ATTNLAB_RATE.search, stdout.splitlines()) if m]
    vals = [m.group(2) for m in map(ATTNLAB_VAL.match, stdout.splitlines()) if m]
    return statistics.median(rates), vals[-1] if vals else "?"


def one_round(checkout: Path, steps: int, threads: int, order: int) -> dict[str, tuple[float, float, str]]:
    """{contender: (wall seconds, tokens/s, last val loss)} of one turn each."""
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_nanogpt_data(corpus(), work / "data" / "shakespeare_char")
        (work / "configurator.py").symlink_to(checkout / "configurator.py")  # train.py execs it from cwd
        for name in ("nanoGPT", "attnlab")[::order]:
            if name == "nanoGPT":
                seconds, out = timed(nanogpt_command(checkout, steps), work, threads)
                found[name] = (seconds, *nanogpt_rate(out))
            else:
                seconds, out = timed(attnlab_command(steps, work / "attnlab"), work, threads)
                found[name] = (seconds, *attnlab_rate(out))
            print(f"[nanogpt] {name}: {seconds:.1f} s, {found[name][1]:,.0f} tok/s", flush=True)
    return found


def run(settings: Settings) -> list[Row]:
    checkout = nanogpt_dir()
    if checkout is None:
        settings.notes.append("nanoGPT train.py: skipped (set NANOGPT_DIR to a checkout of karpathy/nanoGPT)")
        return []
    if not corpus().is_file():
        settings.notes.append(
            f"nanoGPT train.py: skipped (no Tiny Shakespeare at {corpus()}; set TINYSHAKESPEARE)"
        )
        return []
    steps, rounds = settings.pick(full=(2000, 1), quick=(300, 1), tiny=(4, 1))
    rounds_found = [
        one_round(checkout, steps, settings.threads, 1 if r % 2 == 0 else -1) for r in range(rounds)
    ]
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    config = f"baby GPT L4 H4 d128 T{BLOCK} B{BATCH}, {steps} steps, Tiny Shakespeare char, {settings.threads} threads"
    rows = []
    for measure, index, invert in (
        ("whole run wall time, nanoGPT ÷ attnlab", 0, True),
        ("training tokens/s, attnlab ÷ nanoGPT", 1, False),
    ):
        ratios = [
            (r["nanoGPT"][index] / r["attnlab"][index])
            if invert
            else (r["attnlab"][index] / r["nanoGPT"][index])
            for r in rounds_found
        ]
        last = rounds_found[-1]
        detail = (
            f"attnlab {last['attnlab'][0]:.0f} s, {last['attnlab'][1]:,.0f} tok/s, val {last['attnlab'][2]}; "
            f"nanoGPT {last['nanoGPT'][0]:.0f} s, {last['nanoGPT'][1]:,.0f} tok/s, val {last['nanoGPT'][2]}; "
            f"{rounds} round(s), load {load}"
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
                detail,
                1.0,
                "≥ 1×",
            )
        )
    return rows
