"""Time from the ``attnlab-train`` command to its first optimizer step, for the tiny configs.

The run is started as a user would (the console script, in a fresh process) with one extra
callback from the command line, ``FirstStepMarker``, which prints the wall-clock time when
``Trainer.fit`` starts and after the first training batch (its optimizer step done), then ends the
process. Everything before it counts: interpreter start, imports, Hydra composition, validation,
data, model, Trainer setup. The detail column splits the time at ``fit`` and names the part that
``import pytorch_lightning`` alone takes in a fresh interpreter.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl

from benchmarks.common import ROOT, Row, Settings

SECTION = "startup"
TARGET = 5.0  # seconds, at most
MARKER, FIT_MARKER = "ATTNLAB_FIRST_STEP", "ATTNLAB_FIT_START"


class FirstStepMarker(pl.Callback):
    """Prints the unix time at fit start and after the first training batch, then exits the process."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        print(f"{FIT_MARKER} {time.time():.6f}", flush=True)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        print(f"{MARKER} {time.time():.6f}", flush=True)
        os._exit(0)  # the measurement is done; skip the rest of the run


def train_command() -> list[str]:
    script = Path(sys.executable).with_name("attnlab-train")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "attnlab.train"]


def lightning_import_seconds() -> float:
    """Seconds a fresh interpreter takes to ``import pytorch_lightning`` (torch included)."""
    start = time.time()
    subprocess.run([sys.executable, "-c", "import pytorch_lightning"], check=True, capture_output=True)
    return time.time() - start


def time_to_first_step(model: str, timeout: float = 300.0) -> tuple[float, float]:
    """Seconds from starting ``attnlab-train model=<model>`` to ``Trainer.fit`` and to the end of its
    first optimizer step."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            *train_command(),
            f"model={model}",
            "logger=none",
            "trainer.max_steps=2",
            "trainer.enable_progress_bar=false",
            "test_after_fit=false",
            f"run_dir={tmp}",
            "+callbacks.first_step={_target_:benchmarks.startup.FirstStepMarker}",
        ]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "HF_HUB_OFFLINE": "1",
            "WANDB_MODE": "offline",
        }
        start = time.time()
        done = subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
    marks = dict(
        line.split()[:2] for line in done.stdout.splitlines() if line.startswith((MARKER, FIT_MARKER))
    )
    if MARKER in marks and FIT_MARKER in marks:
        return float(marks[FIT_MARKER]) - start, float(marks[MARKER]) - start
    raise RuntimeError(
        f"attnlab-train model={model} printed no first-step marker (exit {done.returncode}): "
        f"{(done.stderr.strip().splitlines() or [''])[-1][:300]}"
    )


def run(settings: Settings) -> list[Row]:
    if settings.tiny:
        settings.notes.append("time to first step: not run at the smoke-test size")
        return []
    plan = settings.pick(
        full=(["gpt-tiny", "bert-tiny", "vit-tiny"], 3), quick=(["gpt-tiny"], 2), tiny=([], 0)
    )
    rows = []
    imports = min(lightning_import_seconds() for _ in range(2)) if plan[0] else 0.0
    for model, repeats in ((m, plan[1]) for m in plan[0]):
        print(f"[startup] attnlab-train model={model}, {repeats} runs", flush=True)
        try:
            times = [time_to_first_step(model) for _ in range(repeats)]
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            settings.notes.append(f"time to first step, model={model}: not measured ({err})")
            continue
        seconds = [step for _, step in times]
        fit = statistics.median(f for f, _ in times)
        detail = (
            f"fresh process each, runs {', '.join(f'{s:.2f}' for s in seconds)} s; Trainer.fit entered at "
            f"{fit:.2f} s (median); `import pytorch_lightning` alone takes {imports:.2f} s"
        )
        config = f"attnlab-train model={model} logger=none (imports, Hydra, validation, data, model, Trainer)"
        rows.append(
            Row(
                SECTION,
                "seconds from invocation to the first optimizer step",
                config,
                statistics.median(seconds),
                min(seconds),
                max(seconds),
                "s",
                detail,
                TARGET,
                f"≤ {TARGET:g} s",
                higher_is_better=False,
            )
        )
    return rows
