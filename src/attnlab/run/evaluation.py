"""An evaluation of a checkpoint as ``attnlab-eval`` asks for it: its config typed with the run it
measures (``typed_eval_config``), then a split, harness tasks or synthetic lengths scored and written
into the output folder (``evaluation``), in this process."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import DictConfig, OmegaConf

from attnlab.run.eval_data import changed_keys, job_run_config
from attnlab.schema.eval import EvalConfig
from attnlab.schema.load import plain, to_object
from attnlab.schema.run import RunConfig
from attnlab.schema.rundir import EVAL_METRICS_FILE
from attnlab.training.console import log_to_file
from attnlab.training.files import save_into, write_atomically
from attnlab.training.rundir import save_config


class EvalJob(NamedTuple):
    """An evaluation checked: its config, the run its checkpoint was trained in, and the run it
    measures (that run with the evaluation's data and model keys)."""

    ev: EvalConfig
    run: RunConfig
    evaluated: RunConfig


def typed_eval_config(config: DictConfig, overrides: list[str]) -> EvalJob:
    """The composed eval config as its schema class, with the data and model it measures typed by the
    checkpoint's classes (composed untyped: ``attnlab.run.eval_data``), checked; and the run the
    checkpoint was trained in and the run this evaluation measures (``job_run_config``), read from the
    checkpoint once."""
    ev: EvalConfig = to_object(config)
    run, evaluated = job_run_config(ev.ckpt_path, overrides, ev.data)
    ev = replace(ev, data=evaluated.data, model=evaluated.model)
    ev.check()
    return EvalJob(ev, run, evaluated)


def evaluation(
    ev: EvalConfig, run: RunConfig, evaluated: RunConfig, out_dir: Path
) -> tuple[dict[str, float], str]:
    """The evaluation ``ev`` asks for (harness tasks, synthetic lengths, or a split) of the checkpoint
    trained in ``run``, measured on ``evaluated``'s data and model settings, written into ``out_dir``
    with its config; its metrics and the key of the run's monitored metric ("" where it has none)."""
    save_config(OmegaConf.structured(ev), out_dir)
    if ev.harness.tasks:
        from attnlab.run.harness import harness_eval

        changed = changed_keys(plain(run.model), plain(evaluated.model), "model")
        return harness_eval(ev, changed, out_dir), ""
    if ev.eval.lengths:
        from attnlab.run.eval_lengths import evaluate_lengths

        return evaluate_lengths(ev, run, evaluated, out_dir), ""
    return evaluate(ev, run, evaluated, out_dir)


def evaluate(
    ev: EvalConfig, run: RunConfig, evaluated: RunConfig, out_dir: Path
) -> tuple[dict[str, float], str]:
    """Metrics of ``ev.ckpt_path`` (trained in ``run``) on ``ev.split`` of ``evaluated``'s data with
    its model settings, written to ``metrics.json``; and the monitored key."""
    import pytorch_lightning as pl
    from hydra.utils import instantiate
    from pytorch_lightning.callbacks import RichProgressBar

    from attnlab.checkpoint import load_task_from_checkpoint
    from attnlab.data import build_datamodule
    from attnlab.training.console import print_summary, quiet_lightning
    from attnlab.training.loggers import build_loggers, finish_wandb, new_wandb_id

    changes = dict(changed_keys(plain(run.model), plain(evaluated.model), "model"))
    task = load_task_from_checkpoint(ev.ckpt_path, model_changes=changes)
    data = replace(evaluated.data, batch_size=ev.batch_size or evaluated.data.batch_size)
    if task.tokenizer is not None and hasattr(data, "tokenizer"):  # the one the model was trained with
        # (kinds without the field, ListOps, build their fixed vocabulary themselves)
        (saved,) = save_into(out_dir, task.tokenizer.save)  # a full disk: one line, no half file
        data = replace(data, tokenizer=str(saved))
    datamodule = build_datamodule(
        data, needs=run.task.inner().data_needs, seed=run.seed, model_cfg=task.model.cfg
    )
    pl.seed_everything(run.seed, verbose=False)
    name = f"eval-{Path(ev.ckpt_path).resolve().parent.parent.name}"
    loggers = build_loggers(
        ev.logger,
        out_dir,
        name=name,
        group="eval",
        wandb_id=new_wandb_id(),
        config=plain(ev),
    )
    limit = (
        ev.limit_batches
        if ev.limit_batches is not None
        else getattr(run.trainer, f"limit_{ev.split}_batches")
    )
    quiet_lightning()
    trainer = instantiate(
        plain(ev.trainer),
        logger=loggers or False,
        limit_test_batches=limit,
        limit_val_batches=limit,
        enable_progress_bar=ev.trainer.enable_progress_bar,
        use_distributed_sampler=False,
        callbacks=[RichProgressBar()] if ev.trainer.enable_progress_bar else [],
        default_root_dir=out_dir,
        _convert_="all",
    )
    from attnlab.tasks.base import LOG_AXES

    results = None
    try:
        run_stage = trainer.test if ev.split == "test" else trainer.validate
        results = run_stage(task, datamodule=datamodule, verbose=False)
    finally:
        finish_wandb(failed=results is None)
    metrics = {k: float(v) for k, v in results[0].items() if k not in LOG_AXES}
    record = {
        "ckpt_path": str(Path(ev.ckpt_path).resolve()),
        "split": ev.split,
        "overrides": eval_overrides(run, replace(evaluated, data=data), ev),
        "metrics": metrics,
    }
    write_atomically(out_dir / EVAL_METRICS_FILE, json.dumps(record, indent=1) + "\n")  # whole or none
    lines = {ev.split: "  ".join(f"{k}={v:.6g}" for k, v in sorted(metrics.items())), "output": str(out_dir)}
    for key, value in lines.items():
        log_to_file(logging.INFO, "%s: %s", key, value)
    print_summary(lines)
    return metrics, f"{ev.split}/{run.task.monitor.split('/', 1)[-1]}"


def eval_overrides(run: RunConfig, evaluated: RunConfig, ev: EvalConfig) -> dict[str, Any]:
    """What this evaluation changed relative to the run, as dotted keys (``data.seq_len``,
    ``model.pos.rope_base``, a different batch limit); {} when it measured exactly what training did.
    The tokenizer is the run's own, only saved next to the results."""
    changed = {
        key: value
        for group in ("data", "model")
        for key, value in changed_keys(plain(getattr(run, group)), plain(getattr(evaluated, group)), group)
        if key != "data.tokenizer"
    }
    limit = f"limit_{ev.split}_batches"
    if ev.limit_batches is not None and ev.limit_batches != getattr(run.trainer, limit):
        changed[f"trainer.{limit}"] = ev.limit_batches
    return changed
