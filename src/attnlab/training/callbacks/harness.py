"""lm-evaluation-harness tasks scored during training: every ``every_n_steps`` optimizer steps, rank 0
scores the model being trained (``attnlab.harness.evaluate``, tasks from local YAML files) and hands
``harness/<task>/<metric>`` to every logger, ``metrics.jsonl`` included, at that step.

    attnlab-train callbacks=harness callbacks.harness.tasks=[my_task] \\
        callbacks.harness.include_path=tasks/ callbacks.harness.every_n_steps=500

The other ranks go on to their next step and wait there for rank 0, whose copy of the model is whole
under DDP or on one device. A model sharded by FSDP, FSDP2 or tensor parallelism is not whole on rank 0:
such runs are refused before they start (``check_trainer``); score their checkpoints with
``attnlab-eval harness.tasks=[...]`` instead.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from attnlab.schema.errors import ConfigError
from attnlab.schema.run import Strategy, TrainerConfig


class HarnessEvaluation(pl.Callback):
    """Scores ``tasks`` on ``pl_module.model`` with ``pl_module.tokenizer`` every ``every_n_steps`` steps
    (the model in eval mode meanwhile, then back in its mode); the arguments are those of
    ``attnlab.harness.evaluate``."""

    def __init__(
        self,
        tasks: list[str],
        include_path: str | None = None,
        every_n_steps: int = 1000,
        batch_size: int = 8,
        num_fewshot: int | None = None,
        limit: int | None = None,
    ) -> None:
        self.check_config("callbacks.harness", locals())
        self.tasks, self.include_path, self.every_n_steps = list(tasks), include_path, every_n_steps
        self.batch_size, self.num_fewshot, self.limit = batch_size, num_fewshot, limit
        self.scored_step = -1  # a step's batches under gradient accumulation: scored once

    @staticmethod
    def check_config(key: str, config: dict[str, Any]) -> None:
        """A ConfigError naming the setting, for arguments that cannot work (checked before the run
        directory, by ``training.targets``, and again when built)."""
        tasks = config.get("tasks")
        if not tasks or isinstance(tasks, str):
            raise ConfigError(f"{key}.tasks", tasks, "give a list of lm-evaluation-harness task names")
        for name in ("every_n_steps", "batch_size"):
            value = config.get(name, 1)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{key}.{name}", value, "must be a whole number >= 1")
        try:
            import lm_eval  # noqa: F401
        except ImportError as err:
            raise ConfigError(
                f"{key}.tasks", tasks, f'needs lm-eval: pip install -e ".[eval]" ({err})'
            ) from None
        from attnlab.harness.names import check_task_names

        check_task_names(tasks, config.get("include_path"), key)

    @staticmethod
    def check_data(key: str, config: dict[str, Any], datamodule: Any) -> None:
        """A ConfigError naming the task, the document and the characters where a text of the tasks'
        requests does not encode with the run's tokenizer (``attnlab.harness.texts``): before the run
        directory, not at the first scoring."""
        from attnlab.harness.run import TaskRefused
        from attnlab.harness.texts import check_task_texts

        tokenizer = getattr(datamodule, "tokenizer", None)
        if tokenizer is None:
            return
        tasks = list(config["tasks"])
        try:
            check_task_texts(
                tasks,
                config.get("include_path"),
                tokenizer,
                limit=config.get("limit"),
                num_fewshot=config.get("num_fewshot"),
            )
        except TaskRefused as err:
            raise ConfigError(f"{key}.tasks", tasks, str(err)) from None

    @staticmethod
    def check_trainer(key: str, trainer: TrainerConfig) -> None:
        """A ConfigError for a strategy that shards the model (FSDP, FSDP2, and tensor or sequence
        parallelism, which run under FSDP2): rank 0 alone would score a shard, or wait forever on the
        others' parameters."""
        if trainer.strategy in (Strategy.fsdp, Strategy.fsdp2):
            raise ConfigError(
                "trainer.strategy",
                trainer.strategy.value,
                f"{key} scores the model on rank 0 alone, and this strategy shards it across processes: "
                "train with trainer.strategy=ddp or auto, or score the run's checkpoints with "
                "attnlab-eval harness.tasks=[...] (after attnlab-consolidate for a sharded one)",
            )

    @staticmethod
    def check_model(key: str, model: Any) -> None:
        """A ConfigError for a model the harness cannot score: it answers with a language model's
        log-likelihoods and generations (``attnlab.harness``: decoders and encoder-decoders)."""
        from attnlab.schema.model import GPTConfig, Seq2SeqConfig

        if not isinstance(model, GPTConfig | Seq2SeqConfig):
            raise ConfigError(
                key,
                "HarnessEvaluation",
                f"scores language models (model.family gpt or seq2seq), not model.family={model.family}: "
                f"leave {key} out",
            )

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step == self.scored_step or step == 0 or step % self.every_n_steps or not trainer.is_global_zero:
            return
        self.scored_step = step
        metrics = self.score(pl_module)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)

    def score(self, pl_module: pl.LightningModule) -> dict[str, float]:
        """``harness/<task>/<metric>`` of the model as it is now. The harness seeds Python's, NumPy's
        and torch's generators; the run's states are put back after, so training goes on as without it."""
        import random

        import numpy as np
        import torch

        from attnlab.harness import evaluate, flat_metrics

        model = pl_module.model
        was_training, python_state, numpy_state = model.training, random.getstate(), np.random.get_state()
        try:
            with torch.random.fork_rng(
                devices=[torch.cuda.current_device()] if torch.cuda.is_available() else []
            ):
                results = evaluate(
                    model,
                    pl_module.tokenizer,
                    self.tasks,
                    self.include_path,
                    batch_size=self.batch_size,
                    num_fewshot=self.num_fewshot,
                    limit=self.limit,
                )
        finally:
            model.train(was_training)
            random.setstate(python_state)
            np.random.set_state(numpy_state)
        return flat_metrics(results)
