"""Fit one validated run into its directory: loggers, callbacks and trainer built, the model fitted,
tested and sampled, and what it reached written to the console, ``test_metrics.json`` and the summary.
``attnlab-train`` (``attnlab.cli.train``) decides what to run; this module runs it, also in a DDP rank.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from attnlab.run.bad_input import error_line
from attnlab.run.prepared import PreparedRun, build_datamodule_for, build_model_for
from attnlab.run.teacher import teacher_of
from attnlab.schema.load import plain
from attnlab.schema.run import RunConfig
from attnlab.schema.rundir import LAST, TEST_METRICS_FILE, checkpoint_dir, run_dir_of
from attnlab.schema.synthetic_data import SyntheticData
from attnlab.schema.task import CausalLMTask
from attnlab.training.console import log_to_file
from attnlab.training.files import write_atomically
from attnlab.training.rundir import (
    announce_run_dir,
    is_rank_zero,
    save_config,
)
from attnlab.training.signals import RunInterrupted, policy

if TYPE_CHECKING:
    import pytorch_lightning as pl
    import torch

    from attnlab.training.summary import RunSummary

log = logging.getLogger("attnlab.train")


def train(
    run: RunConfig | PreparedRun,
    run_dir: Path,
    *,
    group: str | None = None,
    summary: RunSummary | None = None,
    name: str | None = None,
    multirun: bool = False,
) -> float:
    """Fit ``run``, writing into ``run_dir`` (and what it learns of the run into ``summary``), named
    ``name`` in the loggers (default: ``run_name``, else the directory's name); returns the best
    ``task.monitor`` (NaN if never validated). A job of a ``multirun`` prints nothing of its own to the
    console (its ``train.log`` has it all; the multirun prints a line per job and a table). A
    ``PreparedRun`` trains on the data module and teacher its validation built; a bare run config
    builds its own (a DDP rank's, a multirun job's)."""
    prepared = run if isinstance(run, PreparedRun) else PreparedRun(run)
    run = replace(
        prepared.run, run_dir=str(run_dir)
    )  # the directory Hydra chose, also under -m or in a DDP rank
    config = OmegaConf.structured(run)
    if is_rank_zero():
        if run.print_config:  # config.yaml holds it in any case
            from attnlab.training.console import print_config_tree

            print_config_tree(config)
        save_config(config, run_dir)
        where = log_to_file if multirun else log.log  # a multirun's job line names it
        where(logging.INFO, "run directory: %s", run_dir)
    with _job_environment(run_dir):
        name = name or run.run_name or run_dir.name
        prepared = replace(prepared, run=run)
        return _fit(prepared, run_dir, plain(run), group, summary, name, console=not multirun)


def counted_flops(model: object, run: RunConfig) -> dict | None:
    """The model's training FLOPs per token at ``data.seq_len``, counted nanoGPT's and Chinchilla's
    way (``attnlab.models.flops``), for summary.json; None where neither formula describes the model."""
    from attnlab.models.flops import flop_counts

    seq_len = getattr(run.data, "seq_len", None)
    counts = flop_counts(model, seq_len) if seq_len else None
    return counts.as_dict() if counts else None


@contextmanager
def _job_environment(run_dir: Path):
    """Variables set for (and by) Lightning's DDP launcher are undone after the job, the process group
    is destroyed, and wandb is finished even on failure, so the next job of a multirun starts clean."""
    saved = dict(os.environ)
    announce_run_dir(run_dir)
    failed = True
    try:
        yield
        failed = False
    finally:
        from attnlab.training.loggers import finish_wandb

        finish_wandb(failed)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)


def _fit(
    prepared: PreparedRun,
    run_dir: Path,
    config: dict,
    group: str | None,
    summary: RunSummary | None,
    name: str,
    console: bool = True,
) -> float:
    import pytorch_lightning as pl

    from attnlab.models.parallel import gathered
    from attnlab.tasks import build_task
    from attnlab.tasks.nonfinite import NonFiniteGuard
    from attnlab.training.callbacks import LastCheckpoint, build_callbacks
    from attnlab.training.files import save_into
    from attnlab.training.loggers import build_loggers, log_results, new_wandb_id
    from attnlab.training.metrics_file import MetricsFileLogger
    from attnlab.training.resume import changes, changes_line, continuations, read_run_state, report_schedule
    from attnlab.training.summary import best_score, check_monitor_logged, count_parameters, fit_results
    from attnlab.training.trainer import build_trainer

    warnings.filterwarnings("ignore", ".*does not have many workers.*")  # workers are data.num_workers
    run = prepared.run
    pl.seed_everything(run.seed, workers=True, verbose=False)
    datamodule = prepared.datamodule
    if datamodule is None:  # nothing was built by validation (a DDP rank, a multirun's job)
        datamodule = build_datamodule_for(run)
    model = build_model_for(run, datamodule)
    n_params = count_parameters(model)
    if summary is not None:
        summary.update(n_params=n_params, flops_per_token=counted_flops(model, run))
    task = build_task(
        run.task,
        run.optim,
        model,
        tokenizer=datamodule.tokenizer,
        num_classes=datamodule.num_classes,
        max_steps=run.trainer.max_steps,
        teacher=prepared.teacher if prepared.teacher is not None else teacher_of(run),
    )
    task.nonfinite = NonFiniteGuard(run.trainer.on_nonfinite, run.trainer.max_nonfinite_skips)
    resumed = read_run_state(run.ckpt_path) if run.ckpt_path else {}
    changed = changes(run, resumed) if resumed else {}  # check_resume allowed them: optim.on_resume=apply
    task.optim_changes = set(changed)
    history = continuations(run, resumed, changed)  # also in every checkpoint, for the next resume
    if summary is not None:  # rank 0: says so when a resume runs past its schedule's end
        summary.update(
            schedule=report_schedule(run, resumed), **({"continuations": history} if history else {})
        )
        if changed:
            log.info("%s", changes_line(history[-1]))
    wandb_id = resumed.get("wandb_id") or new_wandb_id()
    previous = run_dir_of(run.ckpt_path) if run.ckpt_path else None  # its lines up to the checkpoint
    metrics_file = MetricsFileLogger(run_dir, resumed.get("global_step"), previous)  # whatever logger=
    logged_config = {**config, "run_name": name, "n_params": n_params}  # what the loggers compare runs by
    loggers = [
        *build_loggers(
            run.logger,
            run_dir,
            name=name,
            group=group,
            wandb_id=wandb_id,
            config=logged_config,
            resume_step=resumed.get("global_step"),
        ),
        metrics_file,
    ]
    callbacks = build_callbacks(run, run_dir, config, wandb_id, history, console=console)
    trainer = build_trainer(run, run_dir, loggers, callbacks)
    metrics_file.trainer = trainer
    if trainer.is_global_zero:
        save_into(run_dir, datamodule.save_tokenizer)  # whole files or none, even on a full disk
    trainer.fit(task, datamodule=datamodule, ckpt_path=run.ckpt_path, weights_only=True)  # plain data only
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, LastCheckpoint):
            callback.save_final(trainer)  # the final state, unless last.ckpt holds it already
            policy.end_deferral(trainer.global_step, callback.path)  # a signal since the last step: stop
    check_monitor_logged(trainer, run.task.monitor, run.trainer)
    score = best_score(trainer, run.task.monitor)
    if summary is not None:
        summary.update(**fit_results(trainer, run.task.monitor, summary.fields.get("flops_per_token")))
    policy.phase = "test"  # from here on nothing is left unsaved: a signal stops the run at once
    metrics = test(trainer, task, datamodule, run_dir) if run.test_after_fit else {}
    sampled = gathered(task.model) if wants_sample(run, task) else None  # fsdp2: every rank gathers
    if trainer.is_global_zero:
        policy.phase = "sampling"
        sample = sample_text(run, task.tokenizer, sampled) if sampled is not None else None
        log_results(
            trainer.loggers,
            hparams=logged_config,
            monitor=run.task.monitor,
            best=score,
            sample=sample,
            step=trainer.global_step,
        )
        report(run, run_dir, trainer, metrics, sample, console)
    return score


def test(trainer: pl.Trainer, task: pl.LightningModule, datamodule: Any, run_dir: Path) -> dict[str, float]:
    """Test metrics of the best checkpoint (the current weights if there is none), also written to
    ``test_metrics.json``: what ``attnlab-eval`` reproduces."""
    import json

    from attnlab.tasks.base import LOG_AXES
    from attnlab.training.summary import best_checkpoint

    ckpt = best_checkpoint(trainer)
    results = trainer.test(task, datamodule=datamodule, ckpt_path=ckpt, verbose=False, weights_only=True)
    metrics = {k: float(v) for k, v in (results[0] if results else {}).items() if k not in LOG_AXES}
    if trainer.is_global_zero:
        text = json.dumps({"ckpt_path": ckpt, "metrics": metrics}, indent=1)
        write_atomically(run_dir / TEST_METRICS_FILE, text + "\n")
    return metrics


def wants_sample(run: RunConfig, task: pl.LightningModule) -> bool:
    """Whether the run ends with a sample: a causal LM with a tokenizer, and new tokens asked for (not
    on a synthetic task: its exact match says more, and its alphabet lacks the prompt's letters)."""
    tokenizer = getattr(task, "tokenizer", None)
    return (
        isinstance(run.task.inner(), CausalLMTask)
        and not isinstance(run.data, SyntheticData)
        and tokenizer is not None
        and run.sample.max_new_tokens > 0
    )


def sample_text(run: RunConfig, tokenizer: Any, model: torch.nn.Module) -> str:
    """A sample of ``model``, a trained causal LM (whole: ``gathered`` from its shards under FSDP2),
    within the context length it was trained on (``data.seq_len``): ``generate.sample_in_windows``."""
    import torch

    from attnlab.generate.decoder import sample_in_windows

    s = run.sample
    generator = torch.Generator(next(model.parameters()).device).manual_seed(run.seed)
    ids = sample_in_windows(
        model,
        tokenizer.encode(s.prompt) or [tokenizer.bos_id],
        window=min(run.data.seq_len, model.cfg.max_seq_len),
        max_new_tokens=s.max_new_tokens,
        temperature=s.temperature,
        top_k=s.top_k,
        generator=generator,
    )
    return tokenizer.decode(ids)


def report(
    run: RunConfig,
    run_dir: Path,
    trainer: pl.Trainer,
    metrics: dict[str, float],
    sample: str | None,
    console: bool = True,
) -> None:
    """Log the sample, the test metrics and where the run's files are; print them if ``console``."""
    from attnlab.training.console import print_summary

    lines = {}
    if sample is not None:
        lines["sample"] = "\n" + sample.strip("\n") + "\n"
    if metrics:
        lines["test"] = "  ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()))
    lines["run"] = str(run_dir)
    last = checkpoint_dir(run_dir) / LAST
    if last.exists():  # a file, or a sharded checkpoint's link
        lines["last checkpoint"] = str(last)
    from attnlab.training.summary import best_checkpoint

    best = best_checkpoint(trainer)
    if best:
        lines["best checkpoint"] = best
    from attnlab.training.loggers import wandb_line

    wandb = wandb_line(trainer.loggers)
    if wandb:
        lines["wandb"] = wandb
    for name, value in lines.items():
        log_to_file(logging.INFO, "%s: %s", name, value)
    if console:
        print_summary(lines)


@contextmanager
def run_summary(run_dir: Path) -> Iterator[RunSummary | None]:
    """The job's ``summary.json`` (rank 0 writes it): ``running`` from here on, then ``completed``,
    ``failed`` with the error line the console shows (a multirun job refused by validation too), or
    ``interrupted`` (Ctrl-C, SIGTERM)."""
    if not is_rank_zero():
        yield None
        return
    from attnlab.training.summary import RunSummary

    summary = RunSummary(run_dir)
    try:
        yield summary
    except RunInterrupted as stop:
        summary.finish("interrupted", str(stop), phase=stop.phase)
        raise
    except (KeyboardInterrupt, SystemExit) as err:  # Lightning's SIGTERMException is a SystemExit
        summary.finish("interrupted", type(err).__name__)
        raise
    except BaseException as err:
        summary.finish("failed", error_line(err))
        raise
    summary.finish("completed")
