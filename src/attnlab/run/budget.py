"""``trainer.compute_budget``: a run's steps derived from the training FLOPs it may spend, so that the
runs of a scaling sweep at one budget spend the same compute whatever their size."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from attnlab.schema.errors import ConfigError
from attnlab.schema.model import GPTConfig
from attnlab.schema.run import RunConfig, process_count

KEY = "trainer.compute_budget"
# The most optimizer steps a budget may buy: a billion steps take 12 days at a thousand steps a second,
# more than any run of this framework trains; a budget beyond it is a typo (1e40 for 1e14).
MOST_STEPS = 10**9


def with_budget_steps(run: RunConfig, datamodule: Any, max_steps_given: bool = False) -> RunConfig:
    """``run`` with ``trainer.max_steps`` spending ``trainer.compute_budget`` (unchanged without a
    budget): the budget over Chinchilla's FLOPs per token of the model's shape at ``data.seq_len``
    and the tokens of one optimizer step. The steps are written into the run's config, so that a
    resume continues the same schedule. ConfigError for a budget that buys less than one step or more
    than ``MOST_STEPS``, and with ``max_steps_given`` (``trainer.max_steps`` set on the command line):
    the budget decides the steps, so an explicit step count would be silently replaced."""
    budget = run.trainer.compute_budget
    if budget is None:
        return run
    from attnlab.models.flops import chinchilla_flops_per_token

    if not isinstance(run.model, GPTConfig):
        raise ConfigError(KEY, budget, "counts the FLOPs of a decoder: use it with model=gpt")
    if max_steps_given:
        raise ConfigError(
            KEY,
            budget,
            f"sets trainer.max_steps itself; give one of them, not both (trainer.max_steps={run.trainer.max_steps})",
        )
    vocab = run.model.vocab_size or datamodule.tokenizer.vocab_size
    per_token = chinchilla_flops_per_token(run.model, vocab, run.data.seq_len)
    tokens = run.data.batch_size * run.data.seq_len * run.trainer.accumulate_grad_batches * processes(run)
    steps = budget_steps(budget, per_token * tokens)
    return replace(run, trainer=replace(run.trainer, max_steps=steps))


def budget_steps(budget: float, flops_per_step: float) -> int:
    """The optimizer steps ``budget`` buys at ``flops_per_step``, rounded to the nearest; ConfigError
    for fewer than one or more than ``MOST_STEPS``."""
    steps = round(budget / flops_per_step)
    if steps < 1:
        raise ConfigError(
            KEY,
            budget,
            f"buys less than one optimizer step, which costs {flops_per_step:.3g} FLOPs here: give at least that",
        )
    if steps > MOST_STEPS:
        raise ConfigError(
            KEY,
            budget,
            f"buys {steps:.3g} optimizer steps of {flops_per_step:.3g} FLOPs; at most {MOST_STEPS:.0e} "
            f"(a budget up to {MOST_STEPS * flops_per_step:.3g} FLOPs here)",
        )
    return steps


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
