"""Schemas of ``attnlab-eval``: its one-process trainer, the split, lm-evaluation-harness tasks, a sweep
over lengths, and which model keys an evaluation may change (those that hold no weights)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from attnlab.schema.choice import Choice
from attnlab.schema.errors import ConfigError, not_negative, positive
from attnlab.schema.lengths import LengthSweep
from attnlab.schema.model import GPTConfig, Seq2SeqConfig
from attnlab.schema.run import PRECISIONS, Accelerator, LoggerConfig, batches_ok, devices_ok


@dataclass
class EvalTrainerConfig:
    """The trainer settings ``attnlab-eval`` uses: it evaluates in one process on one device, so it
    has no strategy, no nodes and no training intervals (trainer=cpu or trainer=gpu chooses these).
    ``hydra.utils.instantiate`` builds the Trainer from ``_target_`` and these fields, as for training."""

    _target_: str = "pytorch_lightning.Trainer"
    accelerator: Accelerator = Accelerator.cpu
    devices: Any = 1  # one device: 1, or [<id>] for a given GPU
    precision: str = "32"  # 32 | bf16-mixed | 16-mixed
    enable_progress_bar: bool = True

    def check(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError("trainer.precision", self.precision, f"choose one of {', '.join(PRECISIONS)}")
        an_id = isinstance(self.devices, list) and len(self.devices) == 1 and devices_ok(self.devices)
        if not (self.devices == 1 or (an_id and self.accelerator != Accelerator.cpu)):
            raise ConfigError(
                "trainer.devices",
                self.devices,
                "attnlab-eval runs in one process on one device: 1, or [<id>] for a given GPU",
            )


class Split(Choice):
    test = "test"
    val = "val"


def no_logger() -> LoggerConfig:
    return LoggerConfig(wandb=None)


@dataclass
class HarnessConfig:
    """lm-evaluation-harness tasks that ``attnlab-eval`` scores in place of the split (a decoder's or an
    encoder-decoder's checkpoint; ``pip install -e ".[eval]"``). Offline: tasks are named from
    ``include_path``, a folder of the harness's task YAML files whose data are local files."""

    tasks: list[str] = field(default_factory=list)  # empty: evaluate the split as usual
    include_path: str | None = None
    num_fewshot: int | None = None
    limit: int | None = None  # documents per task (None: all)
    batch_size: int = 8

    def check(self) -> None:
        positive("harness.batch_size", self.batch_size)
        positive("harness.limit", self.limit, allow_none=True)
        not_negative("harness.num_fewshot", self.num_fewshot or 0)


@dataclass
class EvalConfig:
    """What ``attnlab-eval`` needs; ``conf/eval.yaml`` composes it."""

    ckpt_path: str = MISSING  # a checkpoint written by attnlab-train
    split: Split = Split.test
    # The checkpoint's own data config with data.* overrides on top, or data=<preset>: composed untyped
    # (conf/eval.yaml's data/_checkpoint), a DataConfig once typed by the checkpoint's class
    # (attnlab.run.eval_data).
    data: Any = field(default_factory=dict)
    # The checkpoint's model config, composed and typed the same way (model/_checkpoint): only keys that
    # hold no weights may change (eval_may_change), e.g. model.pos.rope_base.
    model: Any = field(default_factory=dict)
    batch_size: int | None = None  # None: the run's data.batch_size
    limit_batches: Any = None  # None: the run's trainer.limit_<split>_batches (as its end-of-training test)
    trainer: EvalTrainerConfig = field(default_factory=EvalTrainerConfig)
    # none: metrics.json holds the results (logger=wandb|csv|... logs them under the run's names too)
    logger: LoggerConfig = field(default_factory=no_logger)
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    eval: LengthSweep = field(default_factory=LengthSweep)  # eval.lengths=[...]: a sweep over lengths

    def check(self) -> None:
        self.harness.check()
        self.eval.check()
        if (
            self.harness.tasks
            and self.model is not None
            and not isinstance(self.model, GPTConfig | Seq2SeqConfig)
        ):
            raise ConfigError(
                "harness.tasks",
                self.harness.tasks,
                "lm-evaluation-harness scores decoder-only and encoder-decoder checkpoints; "
                f"this one is {self.model.family}",
            )
        positive("batch_size", self.batch_size, allow_none=True)
        if self.limit_batches is not None and not batches_ok(self.limit_batches):
            raise ConfigError(
                "limit_batches", self.limit_batches, "a fraction in [0.0, 1.0], a count of batches, or null"
            )
        self.trainer.check()


EVAL_MODEL_KEYS = ("model.attn_backend", "model.attn_window")  # hold no weights (nor does model.pos.rope_*)


def eval_may_change(key: str) -> bool:
    """Whether attnlab-eval (and attnlab-sample) may change the model key ``key`` of a trained model:
    RoPE's frequency settings (``model.pos.rope_*``: its base, and its scaling to longer contexts), the
    attention kernel (``model.attn_backend``) and a sliding window (``model.attn_window``), which hold
    no weights. Every other key sets the shapes of the weights or what they were trained to mean."""
    return key.startswith("model.pos.rope_") or key in EVAL_MODEL_KEYS
