"""``attnlab-eval``: the metrics of a checkpoint on the split its run used, logged under the same names.

    attnlab-eval ckpt_path=outputs/2024-05-01/12-00-00/checkpoints/best-step001000.ckpt
    attnlab-eval ckpt_path=... split=val logger=csv

The run's config travels in the checkpoint (data, seed and tokenizer included), so the test split and
its metrics are exactly those ``attnlab-train`` reported at the end of training (``test_metrics.json``).
The results go into the checkpoint's run directory, ``<run>/eval/<date>_<time>/metrics.json``, with
what the evaluation changed relative to the run, where ``attnlab-report`` finds them.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from attnlab.cli.app import log_to_file, run_hydra, run_job
from attnlab.schema.checks import validate_saved
from attnlab.schema.data import DataConfig
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import plain, to_object
from attnlab.schema.run import EvalConfig, RunConfig
from attnlab.schema.rundir import EVAL_DIR, EVAL_METRICS_FILE, eval_dir_of
from attnlab.training.rundir import save_config

log = logging.getLogger("attnlab.eval")


def main() -> None:
    """Console script ``attnlab-eval`` (also ``python -m attnlab.eval``)."""
    OmegaConf.register_new_resolver("attnlab.eval_dir", eval_dir_for, replace=True)
    run_hydra(eval_job, "eval")


def eval_dir_for(fallback: str, *, _root_: DictConfig) -> str:
    """``${attnlab.eval_dir:outputs}`` in conf/eval.yaml: the ``eval/`` folder of the checkpoint's run
    directory, where attnlab-report looks; ``<fallback>/eval`` for a checkpoint outside a run directory.
    Hydra resolves each job's output directory in the job's own config, so the jobs of
    ``-m ckpt_path=a.ckpt,b.ckpt`` each land in their checkpoint's run (only the sweep's
    ``multirun.yaml`` goes to ``multirun/eval/<time>``, as the base config names no checkpoint)."""
    ckpt_path = OmegaConf.select(_root_, "ckpt_path", default=None, throw_on_missing=False)
    found = isinstance(ckpt_path, str) and Path(ckpt_path).is_file()
    where = eval_dir_of(ckpt_path) if found else None
    return str(where) if where is not None else f"{fallback}/{EVAL_DIR}"


def check_eval_job(config: DictConfig, run_dir: Path | None, overrides: list[str]) -> EvalConfig:
    """The eval config, checked before the output directory exists. A multirun's base config lacks
    a swept ``ckpt_path`` (``-m ckpt_path=a.ckpt,b.ckpt``): each of its checkpoints is checked."""
    swept = swept_values("ckpt_path", overrides) if run_dir is None else []
    if swept and OmegaConf.is_missing(config, "ckpt_path"):
        checked = [check_eval_config(OmegaConf.merge(config, {"ckpt_path": c})) for c in swept]
        return checked[0]  # each checkpoint must exist before any job starts
    return check_eval_config(config)


def swept_values(key: str, overrides: list[str]) -> list[str]:
    """The values of ``key=a,b`` among a multirun's command-line overrides ([] if it is not swept)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return [
        str(value)
        for override in OverridesParser.create().parse_overrides(overrides)
        if override.key_or_group == key and override.is_sweep_override()
        for value in override.sweep_string_iterator()
    ]


def check_eval_config(config: DictConfig) -> EvalConfig:
    """One eval config as its schema class, checked (its rules, and that the checkpoint exists)."""
    ev: EvalConfig = to_object(config)
    ev.check()
    if not Path(ev.ckpt_path).is_file():
        raise ConfigError("ckpt_path", ev.ckpt_path, "no such checkpoint file")
    return ev


def eval_job(config: DictConfig) -> float | None:
    """The Hydra task; returns the split's value of the run's monitored metric."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)

    def job() -> float:
        ev = check_eval_job(config, out_dir, [])
        save_config(OmegaConf.structured(ev), out_dir)
        metrics, monitor = evaluate(ev, out_dir)
        return metrics.get(monitor, math.nan)

    return run_job(job)


def evaluate(ev: EvalConfig, out_dir: Path) -> tuple[dict[str, float], str]:
    """Metrics of ``ev.ckpt_path`` on ``ev.split``, written to ``metrics.json``; and the monitored key."""
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import RichProgressBar

    from attnlab.cli.checkpoint import load_task_from_checkpoint
    from attnlab.data import build_datamodule
    from attnlab.training.console import print_summary
    from attnlab.training.loggers import build_loggers, finish_wandb, new_wandb_id
    from attnlab.training.resume import read_run_state

    saved = read_run_state(ev.ckpt_path).get("config")
    if not saved:
        raise ConfigError(
            "ckpt_path", ev.ckpt_path, "holds no attnlab run config: evaluate a checkpoint of attnlab-train"
        )
    run = validate_saved(saved)
    task = load_task_from_checkpoint(ev.ckpt_path)
    data = replace(run.data, batch_size=ev.batch_size or run.data.batch_size)
    if task.tokenizer is not None and hasattr(data, "tokenizer"):  # the one the model was trained with
        # (kinds without the field, ListOps, build their fixed vocabulary themselves)
        data = replace(data, tokenizer=str(task.tokenizer.save(out_dir)))
    datamodule = build_datamodule(
        data, family=run.model.family, task=run.task.name, seed=run.seed, model_cfg=task.model.cfg
    )
    pl.seed_everything(run.seed, verbose=False)
    name = f"eval-{Path(ev.ckpt_path).resolve().parent.parent.name}"
    loggers = build_loggers(
        replace(ev.logger, run_name=ev.logger.run_name or name),
        out_dir,
        group="eval",
        wandb_id=new_wandb_id(),
        config=plain(ev),
    )
    limit = (
        ev.limit_batches
        if ev.limit_batches is not None
        else getattr(run.trainer, f"limit_{ev.split}_batches")
    )
    trainer = pl.Trainer(
        accelerator=str(ev.trainer.accelerator),
        devices=1,
        precision=ev.trainer.precision,
        logger=loggers or False,
        limit_test_batches=limit,
        limit_val_batches=limit,
        enable_progress_bar=ev.trainer.enable_progress_bar,
        use_distributed_sampler=False,
        callbacks=[RichProgressBar()] if ev.trainer.enable_progress_bar else [],
        default_root_dir=out_dir,
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
        "overrides": eval_overrides(run, data, ev),
        "metrics": metrics,
    }
    (out_dir / EVAL_METRICS_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    lines = {ev.split: "  ".join(f"{k}={v:.6g}" for k, v in sorted(metrics.items())), "output": str(out_dir)}
    for key, value in lines.items():
        log_to_file(logging.INFO, "%s: %s", key, value)
    print_summary(lines)
    return metrics, f"{ev.split}/{run.task.monitor.split('/', 1)[-1]}"


def eval_overrides(run: RunConfig, data: DataConfig, ev: EvalConfig) -> dict[str, Any]:
    """What this evaluation changed relative to the run, as dotted keys (``data.batch_size``, any other
    ``data.*`` it was given, a different batch limit); {} when it measured exactly what training did.
    The tokenizer is the run's own, only saved next to the results."""
    saved, used = asdict(run.data), asdict(data)
    changed = {f"data.{k}": v for k, v in used.items() if k != "tokenizer" and v != saved[k]}
    limit = f"limit_{ev.split}_batches"
    if ev.limit_batches is not None and ev.limit_batches != getattr(run.trainer, limit):
        changed[f"trainer.{limit}"] = ev.limit_batches
    return changed


if __name__ == "__main__":
    main()
