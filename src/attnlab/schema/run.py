"""Schemas of a training run and of ``attnlab-eval``: trainer, loggers, checkpoints, the run as a whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from attnlab.schema.data import DataConfig
from attnlab.schema.model import ModelConfig
from attnlab.schema.task import OptimConfig, TaskConfig

ACCELERATORS = ("cpu", "gpu", "cuda", "mps", "auto")
STRATEGIES = ("auto", "ddp", "fsdp")
PRECISIONS = ("32", "bf16-mixed", "16-mixed")
PROFILERS = ("simple", "advanced", "pytorch")
LOGGERS = ("wandb", "csv", "tensorboard")
WANDB_MODES = ("offline", "online", "disabled")


@dataclass
class TrainerConfig:
    """Lightning Trainer settings; intervals count optimizer steps (not micro-batches)."""

    accelerator: str = "cpu"
    devices: Any = 1  # a count, -1 or "auto" for all, or a list of device ids
    num_nodes: int = 1
    strategy: str = "auto"  # auto | ddp | fsdp
    precision: str = "32"  # 32 | bf16-mixed | 16-mixed
    max_steps: int = 300
    val_every_n_steps: int = 100
    limit_val_batches: Any = 1.0  # a fraction (float), or a count of batches (int)
    limit_test_batches: Any = 1.0
    num_sanity_val_steps: int = 0
    gradient_clip_val: float | None = 1.0
    accumulate_grad_batches: int = 1
    log_every_n_steps: int = 10
    enable_progress_bar: bool = True
    deterministic: bool = False
    fast_dev_run: int = 0  # >0: run this many batches of each stage, write nothing (debug=fdr)
    overfit_batches: Any = 0  # >0: train and validate on this many batches (int) or this fraction (float)
    profiler: str | None = None  # simple | advanced | pytorch


@dataclass
class LoggerConfig:
    """Which loggers record the run; all write under the run directory."""

    names: list[str] = field(default_factory=lambda: ["wandb"])  # wandb, csv, tensorboard; [] for none
    project: str = "attnlab"
    group: str | None = None  # None: one group per multirun (its sweep directory)
    run_name: str | None = None  # None: the run directory's name
    mode: str | None = None  # wandb: offline | online | disabled; None: $WANDB_MODE, else offline
    tags: list[str] = field(default_factory=list)


@dataclass
class CheckpointConfig:
    every_n_steps: int = 100  # writes checkpoints/last.ckpt
    save_top_k: int = 1  # best checkpoints by task.monitor, kept at each validation


@dataclass
class SampleConfig:
    """Text sampled from a trained causal LM at the end of training (0 new tokens: none)."""

    prompt: str = "The "
    max_new_tokens: int = 250
    temperature: float = 0.8
    top_k: int | None = 40


@dataclass
class RunConfig:
    """Everything one ``attnlab-train`` run needs; ``conf/train.yaml`` is its default."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    seed: int = 1337
    ckpt_path: str | None = None  # a checkpoint to resume exactly, or "last" (newest last.ckpt of run_dir)
    run_dir: str | None = None  # write into this directory; None: outputs/<date>/<time>
    compile: bool = False  # torch.compile the model
    test_after_fit: bool = True  # evaluate the best checkpoint on the test split
    callbacks: list[Any] = field(default_factory=list)  # extra Lightning callbacks as {_target_: ...}


@dataclass
class EvalConfig:
    """What ``attnlab-eval`` needs; ``conf/eval.yaml`` is its default."""

    ckpt_path: str = MISSING  # a checkpoint written by attnlab-train
    split: str = "test"  # test | val
    batch_size: int | None = None  # None: the run's data.batch_size
    limit_batches: Any = None  # None: the run's trainer.limit_<split>_batches (as its end-of-training test)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
