"""The cost of Lightning and attnlab's task module: the ``attnlab-train`` path vs a bare PyTorch loop.

Both run the same model, data loader, AdamW + schedule and gradient clipping. The Lightning side is
what ``attnlab-train`` builds (config composed by Hydra and validated, data module, task module,
callbacks, ``build_trainer``), with the logger and checkpoint callbacks off. A step is the time
between the starts of two consecutive training batches (data loading included), so Trainer setup and
teardown are left out; they count in the time-to-first-step section. The two take turns, one block
of steps each per round, and the overhead is reported per round.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from itertools import pairwise
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from pytorch_lightning.callbacks import Checkpoint

from attnlab.cli.app import config_dir, register_schemas
from attnlab.schema.checks import validate
from attnlab.schema.run import RunConfig
from attnlab.tasks import build_task
from attnlab.tasks.optim import configure_optimizers
from attnlab.training.callbacks import build_callbacks
from attnlab.training.trainer import build_trainer
from benchmarks import models
from benchmarks.common import ROOT, Row, Settings
from benchmarks.models import GPTSize

SECTION = "lightning"
TARGET = 3.0  # % overhead, at most
CORPUS = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
WARMUP_STEPS = 3  # first step times of each block left out


class StepClock(pl.Callback):
    """Records when each training batch starts."""

    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        self.starts.append(time.perf_counter())


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
        "trainer.limit_val_batches=0",
        "test_after_fit=false",
        f"run_dir={run_dir}",
    ]
    if CORPUS.is_file():
        overrides += ["data=shakespeare", f"data.path={CORPUS}"]
    register_schemas()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return validate(compose("train", overrides=overrides))


def step_times(starts: list[float]) -> list[float]:
    return [b - a for a, b in pairwise(starts)][WARMUP_STEPS:]


def measure(size: GPTSize, steps: int, rounds: int) -> tuple[list[float], str, float, float]:
    """Per-round overhead in %, the corpus used, and median step times (s) with and without Lightning."""
    from attnlab.data import build_datamodule
    from attnlab.models import build_model

    with tempfile.TemporaryDirectory() as tmp:
        run = run_config(size, steps, Path(tmp))
        pl.seed_everything(run.seed, verbose=False)
        data = build_datamodule(run.data, family="gpt", task="causal_lm", seed=run.seed, model_cfg=run.model)
        data.setup("fit")
        from dataclasses import replace

        model = build_model(replace(run.model, vocab_size=data.vocab_size))
        task = build_task(run.task, run.optim, model, tokenizer=data.tokenizer, max_steps=steps)
        overheads, lightning_med, bare_med = [], [], []
        for _ in range(rounds):
            lightning = lightning_steps(run, task, data, Path(tmp))
            bare = bare_steps(run, model, data, steps)
            lightning_med.append(statistics.median(lightning))
            bare_med.append(statistics.median(bare))
            overheads.append(100 * (lightning_med[-1] / bare_med[-1] - 1))
    corpus = "tinyshakespeare" if CORPUS.is_file() else "default corpus"
    return (
        overheads,
        f"{corpus}, {data.vocab_size} tokens",
        statistics.median(lightning_med),
        statistics.median(bare_med),
    )


def lightning_steps(
    run: RunConfig, task: pl.LightningModule, data: pl.LightningDataModule, run_dir: Path
) -> list[float]:
    clock = StepClock()
    callbacks = [c for c in build_callbacks(run, run_dir, {}, "bench") if not isinstance(c, Checkpoint)]
    trainer = build_trainer(run, run_dir, [], [*callbacks, clock])
    trainer.fit(task, datamodule=data)
    return step_times(clock.starts)


def bare_steps(
    run: RunConfig, model: torch.nn.Module, data: pl.LightningDataModule, steps: int
) -> list[float]:
    """The same work in a plain loop: forward, cross-entropy, backward, clipping, AdamW, schedule."""
    setup = configure_optimizers(model, run.optim, steps)
    optimizer, scheduler = setup["optimizer"], setup["lr_scheduler"]["scheduler"]
    clip = run.trainer.gradient_clip_val
    model.train()
    starts = []
    for step, batch in enumerate(data.train_dataloader()):
        if step == steps:
            break
        starts.append(time.perf_counter())
        logits = model(batch["input_ids"])
        loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
    return step_times(starts)


def run(settings: Settings) -> list[Row]:
    if settings.tiny:
        settings.notes.append("lightning overhead: not run at the smoke-test size")
        return []
    plan = settings.pick(
        full=[(models.GPT_4L, 40, 5), (models.GPT_6L, 12, 3)],
        quick=[(models.GPT_4L, 20, 3), (models.GPT_6L, 8, 1)],
        tiny=[],
    )
    rows = []
    for size, steps, rounds in plan:
        print(f"[lightning] {size.name}: {rounds} rounds of {steps} steps", flush=True)
        overheads, corpus, with_pl, bare = measure(size, steps, rounds)
        detail = (
            f"step {1e3 * with_pl:.1f} ms via attnlab-train's Trainer vs {1e3 * bare:.1f} ms bare; "
            f"{corpus}; AdamW + cosine schedule + clipping both; {rounds} rounds of {steps} steps"
        )
        config = f"{size} ({size.name}), attnlab model, logger and checkpoints off"
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
