"""Scoring tasks of lm-evaluation-harness with an attnlab decoder or encoder-decoder, offline: tasks
are named from ``include_path``, a folder of the harness's task YAML files whose data are local files."""

from __future__ import annotations

from typing import Any

from torch import nn

from attnlab.harness.texts import TaskRefused


def harness_lm(model: nn.Module, tokenizer: Any, batch_size: int = 8) -> Any:
    """The ``lm_eval`` ``LM`` over ``model``: ``AttnlabSeq2SeqLM`` for an encoder-decoder, else
    ``AttnlabLM`` (which refuses anything but a decoder)."""
    from attnlab.harness.lm import AttnlabLM
    from attnlab.harness.seq2seq import AttnlabSeq2SeqLM
    from attnlab.models.seq2seq import Seq2SeqModel

    cls = AttnlabSeq2SeqLM if isinstance(model, Seq2SeqModel) else AttnlabLM
    return cls(model, tokenizer, batch_size=batch_size)


def check_requests(lm: Any, tasks: list[str], task_manager: Any) -> None:
    """TaskRefused, before any scoring, if a task's requests are of a kind ``lm`` refuses (its
    ``refused`` maps a request kind, e.g. ``loglikelihood_rolling``, to the reason)."""
    refused = getattr(lm, "refused", {})
    if not refused:
        return
    for name, task in task_manager.load(tasks)["tasks"].items():
        kind = task.OUTPUT_TYPE
        if kind in refused:
            raise TaskRefused(f"task {name} asks for {kind}: {refused[kind]}")


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
    document's scored responses under ``samples``. TaskRefused, before any scoring, for a task whose
    requests the model cannot answer (a perplexity task on an encoder-decoder)."""
    from lm_eval import simple_evaluate

    from attnlab.harness.names import task_manager

    lm, index = harness_lm(model, tokenizer, batch_size), task_manager(tasks, include_path)
    check_requests(lm, tasks, index)
    return simple_evaluate(
        model=lm,
        tasks=tasks,
        num_fewshot=num_fewshot,
        limit=limit,
        task_manager=index,
        log_samples=True,
        bootstrap_iters=0,
    )


def flat_metrics(results: dict[str, Any]) -> dict[str, float]:
    """``harness/<task>/<metric>`` of ``evaluate``'s results: the scores, not their bookkeeping
    (``"<metric>,<filter>"`` keys, no standard errors)."""
    return {
        f"harness/{task}/{name.split(',')[0]}": float(value)
        for task, values in results["results"].items()
        for name, value in values.items()
        if "," in name and "_stderr" not in name
    }
