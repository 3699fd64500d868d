"""Scoring tasks of lm-evaluation-harness with an attnlab decoder, offline: tasks are named from
``include_path``, a folder of the harness's task YAML files whose data are local files."""

from __future__ import annotations

from typing import Any

from torch import nn


def evaluate(
    model: nn.Module,
    tokenizer: Any,
    tasks: list[str],
    include_path: str | None = None,
    *,
    batch_size: int = 8,
    num_fewshot: int | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """``lm_eval.simple_evaluate`` of ``tasks`` on ``model``: the harness's results dict, with each
    document's scored responses under ``samples``."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from attnlab.harness.lm import AttnlabLM

    return simple_evaluate(
        model=AttnlabLM(model, tokenizer, batch_size=batch_size),
        tasks=tasks,
        num_fewshot=num_fewshot,
        limit=limit,
        task_manager=TaskManager(include_path=include_path),
        log_samples=True,
        bootstrap_iters=0,
    )
