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
from dataclasses import replace
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, read_write

from attnlab.cli.hydra.app import run_hydra
from attnlab.cli.hydra.eval_choices import help_groups
from attnlab.cli.hydra.jobs import log_to_file, run_job
from attnlab.run.bad_input import check_writable
from attnlab.run.devices import check_devices
from attnlab.run.eval_data import (
    changed_keys,
    chooses_preset,
    job_run_config,
    parse,
    saved_run,
    values_of,
)
from attnlab.run.eval_lengths import check_length_sweep
from attnlab.run.harness import check_harness_tasks
from attnlab.schema.errors import ConfigError
from attnlab.schema.eval import EvalConfig
from attnlab.schema.load import plain, to_object
from attnlab.schema.run import RunConfig
from attnlab.schema.rundir import EVAL_DIR, EVAL_METRICS_FILE, eval_dir_of
from attnlab.training.files import save_into, write_atomically
from attnlab.training.lock import new_dir
from attnlab.training.rundir import save_config
from attnlab.training.targets import check_trainer_target

log = logging.getLogger("attnlab.eval")


def main() -> None:
    """Console script ``attnlab-eval`` (also ``python -m attnlab.eval``)."""
    OmegaConf.register_new_resolver("attnlab.eval_dir", eval_dir_for, replace=True)
    OmegaConf.register_new_resolver("attnlab.eval_groups", help_groups, replace=True)
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
    """The eval config, checked before the output directory exists, with the run it measures (its
    checkpoint's, with this evaluation's data). A multirun's base config is checked for every job of
    its grid (``-m ckpt_path=a,b data.seq_len=64,128``), so a bad one stops the sweep before any job."""
    swept = values_of("ckpt_path", parse(overrides)) if run_dir is None else []
    if swept and OmegaConf.is_missing(config, "ckpt_path"):  # -m ckpt_path=a,b: the base config has none
        config = OmegaConf.merge(config, {"ckpt_path": swept[0]})
    fixed = overrides if run_dir is not None else [o for o in overrides if not is_sweep(o)]
    ev, _, _ = typed_eval_config(config, fixed)
    check_length_sweep(ev)
    check_harness_tasks(ev)
    check_devices(ev.trainer, on_the_cpu="use trainer=cpu")
    check_trainer_target(ev.trainer._target_)
    if run_dir is not None:
        return ev
    from attnlab.cli.hydra.sweep_jobs import grid_jobs

    swept = {o.get_key_element() for o in parse(overrides) if o.is_sweep_override()}
    for number, job in enumerate(grid_jobs(parse(overrides))):
        ckpt_path = values_of("ckpt_path", parse(job)) or [ev.ckpt_path]
        try:
            if chooses_preset(parse(job)):  # the preset's data is composed in the job
                saved_run(ckpt_path[0])
            else:
                job_run_config(ckpt_path[0], job, None)
        except ConfigError as err:
            named = " ".join(o for o in job if o.partition("=")[0] in swept)
            raise ValueError(f"job {number} ({named}): {err}") from err
    return ev


def is_sweep(arg: str) -> bool:
    """Whether a command-line override sweeps (``data.seq_len=64,128``): composed job by job."""
    return not arg.startswith("-") and parse([arg])[0].is_sweep_override()


def typed_eval_config(config: DictConfig, overrides: list[str]) -> tuple[EvalConfig, RunConfig, RunConfig]:
    """The composed eval config as its schema class, with the data and model it measures typed by the
    checkpoint's classes (composed untyped: ``attnlab.run.eval_data``), checked; and the run the
    checkpoint was trained in and the run this evaluation measures (``job_run_config``)."""
    ev: EvalConfig = to_object(config)
    run, evaluated = job_run_config(ev.ckpt_path, overrides, ev.data)
    ev = replace(ev, data=evaluated.data, model=evaluated.model)
    ev.check()
    return ev, run, evaluated


def claim_eval_dir(config: DictConfig, run_dir: Path | None) -> None:
    """Two evaluations of one run started in the same second with the same overrides would write one
    folder (``<run>/eval/<date>_<time>_<label>``): the folder is made here, before Hydra writes, and
    the second gets ``<...>_2`` (``training.lock.new_dir``). A multirun's jobs are folders of its own.
    A folder named on the command line (``hydra.run.dir=...``) is used as it is while it holds nothing
    (a folder made for the evaluation); one that holds files gets a ``_2`` as well."""
    if run_dir is None:
        check_writable("hydra.sweep.dir", config.hydra.sweep.dir)
        return
    check_writable("hydra.run.dir", run_dir)
    named = any(str(o).startswith("hydra.run.dir=") for o in config.hydra.overrides.hydra)
    if named and (not run_dir.exists() or (run_dir.is_dir() and not any(run_dir.iterdir()))):
        return
    folder = new_dir(run_dir)
    with read_write(config.hydra):
        config.hydra.run.dir = str(folder)


def eval_job(config: DictConfig) -> float | None:
    """The Hydra task; returns the split's value of the run's monitored metric."""
    hc = HydraConfig.get()
    out_dir = Path(hc.runtime.output_dir)

    def job() -> float:
        ev, run, evaluated = typed_eval_config(config, list(hc.overrides.task))
        metrics, monitor = evaluation(ev, run, evaluated, out_dir)
        if not monitor:  # harness tasks, lengths: their first metric
            return next(iter(metrics.values()), math.nan)
        return metrics.get(monitor, math.nan)

    return run_job(job)


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


if __name__ == "__main__":
    main()
