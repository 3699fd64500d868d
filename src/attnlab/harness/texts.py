"""Task texts that the model's tokenizer cannot encode, named before any scoring: a character model's
vocabulary is its training corpus's characters, and a task's documents may hold others. Without this
check the harness logged a dozen lines and the evaluation failed with the tokenizer's message alone,
naming neither the task nor the document."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterable
from typing import Any

PREVIEW = 40  # characters of a document's text shown in the message
FEWSHOT_SEED = 1234  # lm_eval.simple_evaluate's default: the same few-shot examples as the scoring's


class TaskRefused(ValueError):
    """A task asks for what the model cannot answer: a kind of request, or a text its tokenizer cannot
    encode (the message says why)."""


def check_request_texts(requests: Iterable[Any], tokenizer: Any) -> None:
    """TaskRefused naming the task, the document (its index and first characters) and what the
    tokenizer says it cannot encode (the characters), for the first of ``requests`` (lm_eval
    ``Instance``s) with a text ``tokenizer.encode`` refuses."""
    for request in requests:
        for text in request.args:
            if not isinstance(text, str) or not text:
                continue
            try:
                tokenizer.encode(text)
            except ValueError as err:
                shown = text[:PREVIEW] + ("..." if len(text) > PREVIEW else "")
                raise TaskRefused(
                    f"task {request.task_name}, document {request.doc_id} ({shown!r}): {err}"
                ) from None


def check_task_texts(
    tasks: list[str],
    include_path: str | None,
    tokenizer: Any,
    *,
    limit: int | None = None,
    num_fewshot: int | None = None,
) -> None:
    """Every request the harness would make of ``tasks`` (their documents up to ``limit``, with
    ``num_fewshot`` examples, as ``lm_eval.simple_evaluate`` builds them) encodes with ``tokenizer``;
    else TaskRefused (``check_request_texts``). Quiet: the harness's log lines and progress bars while
    it builds the requests are not shown."""
    from attnlab.harness.names import task_manager

    harness_log = logging.getLogger("lm_eval")
    level = harness_log.level
    harness_log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            loaded = task_manager(tasks, include_path).load(tasks)["tasks"]
            for task in loaded.values():
                fewshot = task.get_config("num_fewshot")
                if num_fewshot is not None and fewshot != 0:
                    task.set_config(key="num_fewshot", value=num_fewshot)
                elif fewshot is None:
                    task.set_config(key="num_fewshot", value=0)
                task.set_fewshot_seed(seed=FEWSHOT_SEED)
                task.build_all_requests(limit=limit)
                check_request_texts(task.instances, tokenizer)
    finally:
        harness_log.setLevel(level)
