"""``attnlab-eval harness.tasks=[...]``: a decoder's or an encoder-decoder's checkpoint scored by lm-evaluation-harness
(``attnlab.harness``) in place of its split; the results go to ``metrics.json`` (as
``harness/<task>/<metric>``) and to the loggers, as an evaluation of the split does.

    attnlab-eval ckpt_path=.../last.ckpt harness.tasks=[my_task] harness.include_path=tasks/
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attnlab.schema.errors import ConfigError
from attnlab.schema.eval import EvalConfig
from attnlab.schema.load import plain
from attnlab.schema.rundir import EVAL_METRICS_FILE
from attnlab.training.files import write_atomically


def check_harness_tasks(ev: EvalConfig) -> None:
    """Before the evaluation's folder exists and before the model is loaded: a ConfigError for a task
    name no task defines, for a task whose requests the checkpoint's model refuses (a perplexity
    task on an encoder-decoder; decoders answer every kind), and for a text of the tasks that the
    checkpoint's tokenizer cannot encode (``check_texts``)."""
    from attnlab.schema.model import Seq2SeqConfig

    if not ev.harness.tasks:
        return
    try:
        import lm_eval.tasks  # noqa: F401 (installed? else harness_eval names what to install)

        from attnlab.harness.names import check_task_names, task_manager
    except ImportError:
        return  # harness_eval names what to install
    tasks, include_path = list(ev.harness.tasks), ev.harness.include_path
    check_task_names(ev.harness.tasks, include_path, "harness")
    if isinstance(ev.model, Seq2SeqConfig):
        from attnlab.harness.run import TaskRefused, check_requests
        from attnlab.harness.seq2seq import AttnlabSeq2SeqLM

        try:
            check_requests(AttnlabSeq2SeqLM, tasks, task_manager(tasks, include_path))
        except TaskRefused as err:
            raise ConfigError("harness.tasks", ev.harness.tasks, str(err)) from None
    check_texts(ev)


def check_texts(ev: EvalConfig) -> None:
    """Every text of the tasks' requests encodes with the checkpoint's tokenizer, else a ConfigError
    naming the task, the document and the characters (``attnlab.harness.texts``): before the folder."""
    from attnlab.checkpoint import checkpoint_tokenizer
    from attnlab.harness.run import TaskRefused
    from attnlab.harness.texts import check_task_texts
    from attnlab.schema.model import GPTConfig, Seq2SeqConfig

    if not isinstance(ev.model, GPTConfig | Seq2SeqConfig):  # not a language model: harness_eval says so
        return
    tokenizer = checkpoint_tokenizer(ev.ckpt_path)
    if tokenizer is None:
        return
    h = ev.harness
    try:
        check_task_texts(list(h.tasks), h.include_path, tokenizer, limit=h.limit, num_fewshot=h.num_fewshot)
    except TaskRefused as err:
        raise ConfigError("harness.tasks", h.tasks, str(err)) from None


def harness_eval(ev: EvalConfig, model_changes: list[tuple[str, Any]], out_dir: Path) -> dict[str, float]:
    """Score ``ev.harness.tasks`` on the checkpoint's model; its metrics, also in ``metrics.json``."""
    from attnlab.checkpoint import load_checkpoint
    from attnlab.models import DecoderLM
    from attnlab.models.seq2seq import Seq2SeqModel
    from attnlab.training.console import print_summary
    from attnlab.training.loggers import build_loggers, finish_wandb, new_wandb_id

    h = ev.harness
    loaded = load_checkpoint(ev.ckpt_path, model_changes=dict(model_changes))
    if not isinstance(loaded.model, DecoderLM | Seq2SeqModel):
        raise ConfigError(
            "harness.tasks",
            h.tasks,
            "lm-evaluation-harness scores decoder-only and encoder-decoder checkpoints; "
            f"this one is {loaded.family}",
        )
    try:
        from attnlab.harness import TaskRefused, evaluate, flat_metrics
    except ImportError as err:
        raise ConfigError(
            "harness.tasks", h.tasks, f'needs lm-eval: pip install -e ".[eval]" ({err})'
        ) from None
    try:
        results = evaluate(
            loaded.model,
            loaded.tokenizer,
            list(h.tasks),
            h.include_path,
            batch_size=h.batch_size,
            num_fewshot=h.num_fewshot,
            limit=h.limit,
        )
    except TaskRefused as err:
        raise ConfigError("harness.tasks", h.tasks, str(err)) from None
    metrics = flat_metrics(results)
    record = {"ckpt_path": str(Path(ev.ckpt_path).resolve()), "harness": plain(h), "metrics": metrics}
    write_atomically(out_dir / EVAL_METRICS_FILE, json.dumps(record, indent=1) + "\n")  # whole or none
    loggers = build_loggers(
        ev.logger, out_dir, name="eval-harness", group="eval", wandb_id=new_wandb_id(), config=plain(ev)
    )
    try:
        for logger in loggers:
            logger.log_metrics(metrics, step=0)
            logger.save()
    finally:
        finish_wandb(failed=False)
    print_summary({"harness": "  ".join(f"{k}={v:.6g}" for k, v in metrics.items()), "output": str(out_dir)})
    return metrics
