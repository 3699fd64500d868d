"""``attnlab-train``: compose the config with Hydra, validate it, build data, model and task, and fit.

    attnlab-train                                  # the default small GPT, char-level, on CPU
    attnlab-train model=vit pos=rope trainer.max_steps=500
    attnlab-train -m pos=sinusoidal,rope,alibi model.n_layers=2,4
    attnlab-train run_dir=outputs/2024-05-01/12-00-00 ckpt_path=last      # resume exactly, in place

Nothing heavy is imported, and no directory is created, until the whole config has been validated.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from attnlab.cli.app import run_hydra
from attnlab.cli.bad_input import error_line
from attnlab.cli.budget import with_budget_steps
from attnlab.cli.devices import check_attention_backend, check_devices, check_float8, check_strategy
from attnlab.cli.jobs import log_to_file, one_line_per_job, run_job
from attnlab.cli.prepared import build_model_for, prepare_datamodule, take_datamodule
from attnlab.cli.pretrained import explicit_model_keys, resolve_init_from
from attnlab.cli.teacher import check_teacher, check_teacher_run, take_teacher
from attnlab.schema.checks import validate, validate_saved
from attnlab.schema.data import SyntheticData
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import plain
from attnlab.schema.run import RUN_DIR, RunConfig
from attnlab.schema.rundir import LAST, TEST_METRICS_FILE, checkpoint_dir, run_dir_of
from attnlab.schema.task import CausalLMTask
from attnlab.training.files import write_atomically
from attnlab.training.lock import lock_run_dir
from attnlab.training.rundir import (
    announce_run_dir,
    ddp_child_run_dir,
    external_world_size,
    is_rank_zero,
    load_config,
    resolve_ckpt_path,
    save_config,
)
from attnlab.training.signals import RunInterrupted, policy
from attnlab.training.targets import check_targets

if TYPE_CHECKING:
    import pytorch_lightning as pl
    import torch

    from attnlab.training.summary import RunSummary

log = logging.getLogger("attnlab.train")


def main() -> None:
    """Console script ``attnlab-train`` (also ``python -m attnlab.train``)."""
    policy.install()  # SIGINT/SIGTERM from here on end the run in one line, whatever its phase
    child_dir = ddp_child_run_dir()
    if child_dir is not None:  # a DDP rank that Lightning launched: rank 0 chose the run and its config
        try:
            train(validate_saved(load_config(child_dir)), child_dir)
        except RunInterrupted as stop:  # rank 0 tells the user how to resume
            sys.exit(stop.exit_code)
        return
    one_line_per_job()  # under -m: each job prints one line when it ends, the multirun a table
    run_hydra(train_job, "train")


def check_job(config: DictConfig, run_dir: Path | None, overrides: list[str]) -> RunConfig:
    """All that can be checked before the run directory exists: types, rules between fields, the
    pretrained checkpoint of ``model.init_from``, the accelerators, the data's files (their heads), the
    run directory, and the checkpoint to resume from. ``run_dir`` is the directory Hydra will write into (None for a
    multirun's base config)."""
    from attnlab.data import check_source

    check_teacher_run(config)  # task=distill: the teacher's file, family and task
    run = resolve_init_from(validate(config), explicit_model_keys(overrides))
    check_sweeper(config, run)
    check_devices(run.trainer)
    check_strategy(run.trainer)
    check_float8(run.trainer)
    check_attention_backend(run)
    check_targets(run)
    check_source(run.data, run.model)
    given = run_dir_given(config)
    if run_dir is None:  # a multirun's base config: every job is checked again
        if given:
            raise ConfigError(
                "run_dir", run.run_dir, "a multirun writes one directory per job: set hydra.sweep.dir"
            )
        return run
    if external_world_size() > 1 and not given:
        raise ConfigError(
            "run_dir",
            None,
            f"{external_world_size()} processes started by torchrun or SLURM must share one "
            "directory: give run_dir=<dir>",
        )
    run = replace(run, ckpt_path=resolve_ckpt_path(run.ckpt_path, run_dir))
    from attnlab.training.resume import check_resume

    run = with_budget_steps(run, prepare_datamodule(run))  # before check_resume compares the steps
    check_resume(run)
    check_teacher(run, prepare_datamodule(run))
    return run


def claim_run_dir(config: DictConfig, run_dir: Path | None) -> None:
    """Rank 0 holds the run directory (a multirun's sweep directory, which holds its jobs') from when
    its config is valid, before Hydra writes into it, to the end of the command: one run per
    directory (``training.lock``). The other ranks write into the directory their rank 0 holds."""
    if not is_rank_zero():
        return
    if run_dir is None:
        lock_run_dir(Path(config.hydra.sweep.dir), "hydra.sweep.dir")
    else:
        lock_run_dir(run_dir)


def run_dir_given(config: DictConfig) -> bool:
    """Whether ``run_dir`` was set (on the command line or in a config), rather than left at its
    default of a new dated directory."""
    return OmegaConf.to_container(OmegaConf.masked_copy(config, ["run_dir"]))["run_dir"] != RUN_DIR


def check_sweeper(config: DictConfig, run: RunConfig) -> None:
    """An Optuna search must optimise ``task.monitor`` in the direction of ``task.monitor_mode``."""
    direction = OmegaConf.select(config, "hydra.sweeper.direction", default=None)
    wanted = {"min": "minimize", "max": "maximize"}[run.task.monitor_mode]
    if isinstance(direction, str) and direction != wanted:
        raise ConfigError(
            "hydra.sweeper.direction",
            direction,
            f"must be {wanted} for task.monitor={run.task.monitor} "
            f"(task.monitor_mode={run.task.monitor_mode})",
        )


def train_job(config: DictConfig) -> float | None:
    """The Hydra task: one run (or one job of a multirun); returns the best value of ``task.monitor``."""
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    group = Path(hc.sweep.dir).as_posix().replace("/", "_") if multirun else None

    def job() -> float:
        from attnlab.training.names import run_name

        overrides = list(hc.overrides.task)
        policy.reset()
        try:
            with run_summary(run_dir) as summary:
                run = check_job(config, run_dir, overrides)
                name = run_name(run.run_name, overrides, run_dir.name, multirun)
                with peer_failure_said(run_dir, overrides):
                    score = train(run, run_dir, group=group, summary=summary, name=name, multirun=multirun)
                if multirun and summary is not None:
                    announce_job(hc.job.num, name, run_dir, summary)
                return score
        except RunInterrupted as stop:  # summary.json: interrupted, in the phase the signal came
            exit_interrupted(stop, run_dir, overrides)

    return run_job(job)


def exit_interrupted(stop: RunInterrupted, run_dir: Path, overrides: list[str]) -> NoReturn:
    """Say what the signal stopped and how to continue (SLURM's warning: also requeue the job), then
    exit with the status a shell gives a process ended by that signal (130, 143, 138)."""
    from attnlab.training.slurm import REQUEUE_SIGNAL, requeue_job

    message = f"{stop}\nresume with: {resume_command(run_dir, overrides)}"
    if stop.signum == REQUEUE_SIGNAL and is_rank_zero():  # SLURM's warning before the time limit
        message += f"\n{requeue_job()}"
    log_to_file(logging.WARNING, "interrupted by %s", message)
    print(f"interrupted by {message}", file=sys.stderr)
    sys.exit(stop.exit_code)


@contextmanager
def peer_failure_said(run_dir: Path, overrides: list[str]) -> Iterator[None]:
    """A collective failed by a dead or frozen peer process (``training.peers``) becomes ``PeerLost``,
    whose one line says so and how to continue (every process again, ``ckpt_path=auto``)."""
    from attnlab.training.peers import PeerLost, lost_peer

    try:
        yield
    except RuntimeError as err:
        said = lost_peer(err)
        if said is None:
            raise
        command = resume_command(run_dir, overrides, ckpt_path="auto")
        if external_world_size() > 1:  # its processes were started by torchrun or srun, not attnlab-train
            command = "the same torchrun or srun command with " + command.removeprefix("attnlab-train ")
        raise PeerLost(
            f"a process of this distributed run died or stopped answering ({said}); continue from the "
            f"last checkpoint by starting every process again: {command}"
        ) from err


def announce_job(number: int, name: str, run_dir: Path, summary: RunSummary) -> None:
    """A multirun job's one console line (its other output goes to its ``train.log``), and its row of
    the table the multirun ends with: the best monitored value, the test metrics, the time, the folder."""
    import json
    from datetime import timedelta

    from attnlab.cli.jobs import record_job

    row = {"job": str(number), "run": name, "status": "completed"}
    best = summary.fields.get("best")
    if best:
        row[f"best {best['metric']}"] = f"{best['value']:.4g} (step {best['step']})"
    test_file = run_dir / TEST_METRICS_FILE
    metrics = json.loads(test_file.read_text())["metrics"] if test_file.is_file() else {}
    row.update((key, f"{value:.4g}") for key, value in sorted(metrics.items()))
    row["time"] = str(timedelta(seconds=int(summary.elapsed_s)))
    row["folder"] = str(run_dir)
    record_job(row)
    shown = [f"{key} {value}" for key, value in row.items() if key not in ("job", "run", "status", "folder")]
    print(f"job {number} ({name}): {' | '.join(shown)} | {run_dir}", flush=True)


def resume_command(run_dir: Path, overrides: list[str], ckpt_path: str | None = None) -> str:
    """The command that continues this run exactly from its ``last.ckpt``, in place (``ckpt_path=auto``
    where it has none yet: interrupted before its first checkpoint, it starts again; or where
    ``ckpt_path`` says so: every process of a distributed run resolves it alike)."""
    mine = ("run_dir=", "ckpt_path=", "hydra.run.dir=")
    kept = [o for o in overrides if not o.startswith(mine)]
    ckpt_path = ckpt_path or ("last" if any(checkpoint_dir(run_dir).glob("last*.ckpt")) else "auto")
    args = [f"run_dir={run_dir.resolve()}", f"ckpt_path={ckpt_path}", *kept]
    return " ".join(["attnlab-train", *map(shlex.quote, args)])


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


def train(
    run: RunConfig,
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
    console (its ``train.log`` has it all; the multirun prints a line per job and a table)."""
    run = replace(run, run_dir=str(run_dir))  # the directory Hydra chose, also under -m or in a DDP rank
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
        return _fit(run, run_dir, plain(run), group, summary, name, console=not multirun)


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
    run: RunConfig,
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
    pl.seed_everything(run.seed, workers=True, verbose=False)
    datamodule = take_datamodule(run)  # built (and checked) by the validation of a single run
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
        teacher=take_teacher(run),
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
        summary.update(**fit_results(trainer, run.task.monitor))
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


if __name__ == "__main__":
    main()
