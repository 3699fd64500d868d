"""Part (a) of ``benchmarks.gpu``: nanoGPT's shakespeare_char recipe end to end, both programs.

``attnlab-train experiment=nanogpt_shakespeare_char`` and nanoGPT's own ``train.py
config/train_shakespeare_char.py`` each run as a child process on the same text, and each is timed
from its start to its exit (imports, compilation and evaluations included), as a user waits for
it. The best validation loss comes from attnlab's ``summary.json`` and from nanoGPT's ``step N: ...
val loss X`` lines. The two estimate it differently: attnlab scores the whole validation split,
nanoGPT the mean of ``eval_iters`` random batches.

nanoGPT runs in a scratch folder: its ``train.py``, ``model.py``, ``configurator.py`` and
``config/`` are copied from ``NANOGPT_DIR`` (never into this repository), and its
``data/shakespeare_char`` files are written here from the text file, as its ``prepare.py`` would
write them but without its download.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import ROOT
from benchmarks.nanogpt.checkout import best_val, write_data

NANOGPT_FILES = ("train.py", "model.py", "configurator.py", "config")
# Tiny shapes for a smoke run on the CPU: both programs, 2 steps of a 1-layer model.
ATTNLAB_TINY = [
    "trainer=cpu",
    "compile=false",
    "model.n_layers=1",
    "model.n_heads=2",
    "model.d_model=16",
    "data.seq_len=16",
    "data.batch_size=4",
    "trainer.val_every_n_steps=2",
    "trainer.limit_val_batches=2",
    "checkpoint.every_n_steps=2",
    "sample.max_new_tokens=0",
]
NANOGPT_TINY = [
    "--device=cpu",
    "--compile=False",
    "--dtype=float32",
    "--n_layer=1",
    "--n_head=2",
    "--n_embd=16",
    "--block_size=16",
    "--batch_size=4",
    "--eval_interval=2",
    "--eval_iters=2",
    "--warmup_iters=1",
]


@dataclass
class RecipeRun:
    """One program's run of the recipe: its wall time and best validation loss (at which step)."""

    program: str
    wall_s: float
    best_val: float
    best_step: int
    command: str


def timed(args: list[str], cwd: Path, timeout: float) -> tuple[float, str]:
    """Run ``args`` in ``cwd``; its wall time and its stdout + stderr. RuntimeError if it fails."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    wall = time.perf_counter() - start
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} ... exited {done.returncode}:\n{output[-3000:]}")
    return wall, output


def run_attnlab(text_file: Path, work: Path, steps: int, tiny: bool, timeout: float) -> RecipeRun:
    run_dir = work / "attnlab"
    args = [
        sys.executable,
        "-m",
        "attnlab.train",
        "experiment=nanogpt_shakespeare_char",
        *(ATTNLAB_TINY if tiny else ["trainer=gpu"]),
        f"trainer.max_steps={steps}",
        f"data.path={text_file.resolve()}",
        f"run_dir={run_dir}",
        "logger=none",  # a bare GPU machine has no wandb
        "trainer.enable_progress_bar=false",
    ]
    wall, _ = timed(args, ROOT, timeout)
    best = json.loads((run_dir / "summary.json").read_text())["best"]
    return RecipeRun("attnlab", wall, best["value"], best["step"], " ".join(args[1:]))


def run_nanogpt(
    nanogpt_dir: Path, text_file: Path, work: Path, steps: int, tiny: bool, timeout: float
) -> RecipeRun:
    scratch = work / "nanogpt"
    scratch.mkdir(parents=True, exist_ok=True)
    for name in NANOGPT_FILES:
        source = nanogpt_dir / name
        if not source.exists():
            raise FileNotFoundError(f"NANOGPT_DIR={nanogpt_dir}: no {name} (a karpathy/nanoGPT checkout?)")
        copy = shutil.copytree if source.is_dir() else shutil.copy
        copy(source, scratch / name)
    write_data(text_file, scratch / "data" / "shakespeare_char")
    args = [
        sys.executable,
        "train.py",
        "config/train_shakespeare_char.py",
        *(NANOGPT_TINY if tiny else []),
        f"--max_iters={steps}",
        f"--lr_decay_iters={steps}",
    ]
    wall, log = timed(args, scratch, timeout)
    loss, step = best_val(log)
    return RecipeRun("nanoGPT", wall, loss, step, " ".join(args[1:]))
