"""The cost of Lightning and attnlab's task module: the ``attnlab-train`` path vs a bare PyTorch loop.

Both run the same model (each its own copy), data loader, AdamW + schedule and gradient clipping. The
Lightning side is what ``attnlab-train`` builds (config composed by Hydra and validated, data module,
task module, callbacks, ``build_trainer``), with the logger and checkpoint callbacks off. The two take
turns one training step each, in one thread (``BareTurns``: the Lightning fit runs a step of the bare
loop at the start of each of its batches), so a drift of the machine slows both alike; data loading
is in both steps, Trainer setup and teardown in neither (they count in the time-to-first-step
section). The first ``WARMUP_STEPS`` of each are not timed; the overhead is reported per round.
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytorch_lightning as pl
import torch

from attnlab import run as attnlab_run
from attnlab.schema.run import RunConfig
from attnlab.tasks import build_task
from attnlab.training.callbacks import build_callbacks
from attnlab.training.trainer import build_trainer
from benchmarks import models
from benchmarks.common import ROOT, Row, Settings
from benchmarks.models import GPTSize
from benchmarks.step_cost.references import plain_steps

SECTION = "lightning"
TARGET = 3.0  # % overhead, at most
CORPUS = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
WARMUP_STEPS = 3  # the first steps of each side, not timed


LIGHTNING, BARE = "attnlab-train's Trainer", "bare loop"


def run_config(size: GPTSize, steps: int, run_dir: Path) -> RunConfig:
    """What ``attnlab-train`` would run for ``size``: composed from conf/ by Hydra, then validated."""
    overrides = [
        f"model.n_layers={size.n_layers}",
        f"model.n_heads={size.n_heads}",
        f"model.d_model={size.d_model}",
        f"model.max_seq_len={size.seq_len}",
        "model.dropout=0.0",
        f"data.seq_len={size.seq_len}",
        f"data.batch_size={size.batch}",
        "logger=none",
        "trainer.enable_progress_bar=false",
        f"trainer.max_steps={steps}",
        f"trainer.val_every_n_steps={10 * steps}",
        f"checkpoint.every_n_steps={10 * steps}",
        "trainer.limit_val_batches=0",
        "test_after_fit=false",
        f"run_dir={run_dir}",
    ]
    if CORPUS.is_file():
        overrides += ["data=shakespeare", f"data.path={CORPUS}"]
    return attnlab_run.run_config(overrides)


def measure(size: GPTSize, steps: int, rounds: int) -> tuple[list[float], str, float, float]:
    """Per-round overhead in %, the corpus used, and median step times (s) with and without Lightning."""
    from attnlab.data import build_datamodule
    from attnlab.models import build_model

    with tempfile.TemporaryDirectory() as tmp:
        run = run_config(size, steps, Path(tmp))
        pl.seed_everything(run.seed, verbose=False)
        data = build_datamodule(run.data, needs=run.task.data_needs, seed=run.seed, model_cfg=run.model)
        data.setup("fit")
        model = build_model(replace(run.model, vocab_size=data.vocab_size))
        bare_model = copy.deepcopy(model)
        task = build_task(run.task, run.optim, model, tokenizer=data.tokenizer, max_steps=steps)
        overheads, lightning_med, bare_med = [], [], []
        for _ in range(rounds):
            times = in_turns(run, task, bare_model, data, Path(tmp))
            lightning_med.append(times[LIGHTNING]["wall"] / times[LIGHTNING]["steps"])
            bare_med.append(times[BARE]["wall"] / times[BARE]["steps"])
            overheads.append(100 * (lightning_med[-1] / bare_med[-1] - 1))
    corpus = "tinyshakespeare" if CORPUS.is_file() else "default corpus"
    return (
        overheads,
        f"{corpus}, {data.vocab_size} tokens",
        statistics.median(lightning_med),
        statistics.median(bare_med),
    )


class BareTurns(pl.Callback):
    """Runs one step of the bare loop at the start of each Lightning training batch, in the same thread
    (and so the same OpenMP threads: a second Python thread would bring a second team, whose workers
    spin while the other team computes), and times both sides' steps from ``first`` on: a Lightning
    step is the time from the end of one bare step to the start of the next, a bare step the time
    it takes."""

    def __init__(self, bare: Iterator[None], first: int) -> None:
        self.bare, self.first = bare, first
        self.times = {name: {"steps": 0, "wall": 0.0, "cpu": 0.0} for name in (LIGHTNING, BARE)}
        self.mark: tuple[float, float] | None = None  # the clocks when the last bare step ended

    def on_train_batch_start(self, trainer: pl.Trainer, *args: object) -> None:
        step = trainer.global_step
        if self.mark is not None:  # Lightning's step step - 1 ends here
            self.add(LIGHTNING, self.mark)
        start = (time.perf_counter(), time.thread_time())
        next(self.bare)  # the bare loop's step ``step``
        if step >= self.first:
            self.add(BARE, start)
        self.mark = (time.perf_counter(), time.thread_time()) if step >= self.first else None

    def add(self, name: str, since: tuple[float, float]) -> None:
        spent = self.times[name]
        spent["steps"] += 1
        spent["wall"] += time.perf_counter() - since[0]
        spent["cpu"] += time.thread_time() - since[1]


def in_turns(
    run: RunConfig,
    task: pl.LightningModule,
    bare_model: torch.nn.Module,
    data: pl.LightningDataModule,
    run_dir: Path,
) -> dict[str, dict]:
    """Both sides' timed steps (``{name: {"steps", "wall", "cpu"}}``), one step each in turn: the
    Lightning fit runs the bare loop's steps from a callback. Each side's last step is left out."""
    turns = BareTurns(plain_steps(run, bare_model, data), WARMUP_STEPS)
    trainer = build_trainer(run, run_dir, [], [*build_callbacks(run, run_dir, {}, "bench"), turns])
    trainer.fit(task, datamodule=data)
    return turns.times


def run(settings: Settings) -> list[Row]:
    if settings.tiny:
        settings.notes.append("lightning overhead: not run at the smoke-test size")
        return []
    plan = settings.pick(
        full=[(models.GPT_4L, 100, 5), (models.GPT_6L, 12, 3)],
        quick=[(models.GPT_4L, 20, 3), (models.GPT_6L, 8, 1)],
        tiny=[],
    )
    rows = []
    for size, steps, rounds in plan:
        print(f"[lightning] {size.name}: {rounds} rounds of {steps} steps", flush=True)
        overheads, corpus, with_pl, bare = measure(size, steps, rounds)
        detail = (
            f"step {1e3 * with_pl:.1f} ms via attnlab-train's Trainer vs {1e3 * bare:.1f} ms bare; "
            f"{corpus}; AdamW + cosine schedule + clipping both; {rounds} rounds of {steps} steps, "
            f"the two in turns one step each"
        )
        config = f"{size} ({size.name}), attnlab model, logger off, no checkpoint due"
        rows.append(
            Row(
                SECTION,
                "overhead of Lightning + task module vs bare loop (%)",
                config,
                statistics.median(overheads),
                min(overheads),
                max(overheads),
                "%",
                detail,
                TARGET,
                f"≤ {TARGET:g}%",
                higher_is_better=False,
            )
        )
    return rows
