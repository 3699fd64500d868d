"""``trainer.compute_budget``: a run's steps derived from the training FLOPs it may spend, so that the
runs of a scaling sweep at one budget spend the same compute whatever their size."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from attnlab.schema.errors import ConfigError
from attnlab.schema.model import GPTConfig
from attnlab.schema.run import RunConfig, process_count


def with_budget_steps(run: RunConfig, datamodule: Any) -> RunConfig:
    """``run`` with ``trainer.max_steps`` spending ``trainer.compute_budget`` (unchanged without a
    budget): the budget over Chinchilla's FLOPs per token of the model's shape at ``data.seq_len``
    and the tokens of one optimizer step. The steps are written into the run's config, so that a
    resume continues the same schedule."""
    budget = run.trainer.compute_budget
    if budget is None:
        return run
    from attnlab.models.flops import chinchilla_flops_per_token, steps_for_budget

    if not isinstance(run.model, GPTConfig):
        raise ConfigError(
            "trainer.compute_budget", budget, "counts the FLOPs of a decoder: use it with model=gpt"
        )
    vocab = run.model.vocab_size or datamodule.tokenizer.vocab_size
    per_token = chinchilla_flops_per_token(run.model, vocab, run.data.seq_len)
    tokens = run.data.batch_size * run.data.seq_len * run.trainer.accumulate_grad_batches * processes(run)
    steps = steps_for_budget(budget, per_token, tokens)
    return replace(run, trainer=replace(run.trainer, max_steps=steps))


def processes(run: RunConfig) -> int:
    """The processes that draw a batch of their own each step: an outside launcher's, else devices x
    nodes, over the tensor-parallel size (a tensor-parallel group shares one batch)."""
    from attnlab.training.rundir import external_world_size

    count = external_world_size() if external_world_size() > 1 else process_count(run.trainer)
    if count is None:
        raise ConfigError(
            "trainer.devices",
            run.trainer.devices,
            "trainer.compute_budget needs the number of processes: give trainer.devices as a count",
        )
    return max(1, count // run.trainer.tensor_parallel_size)
