"""``attnlab-train``: compose the config with Hydra, validate it, build data, model and task, and fit.

    attnlab-train                                  # the default small GPT, char-level, on CPU
    attnlab-train model=vit pos=rope trainer.max_steps=500
    attnlab-train -m pos=sinusoidal,rope,alibi model.n_layers=2,4
    attnlab-train run_dir=outputs/2024-05-01/12-00-00 ckpt_path=last      # resume exactly, in place

Nothing heavy is imported, and no directory is created, until the whole config has been validated.
"""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from attnlab.cli.hydra.app import checked_by_validation, run_hydra
from attnlab.cli.hydra.jobs import log_to_file, one_line_per_job, run_job
from attnlab.cli.hydra.teacher_defaults import check_teacher_run
from attnlab.run.fit import run_summary, train
from attnlab.run.prepared import PreparedRun, check_callbacks_data_of_job, check_machine, prepare_run
from attnlab.run.pretrained import explicit_model_keys, resolve_init_from
from attnlab.schema.checks import validate, validate_saved
from attnlab.schema.errors import ConfigError
from attnlab.schema.run import RUN_DIR, RunConfig
from attnlab.schema.rundir import TEST_METRICS_FILE, checkpoint_dir
from attnlab.training.files import is_disk_full
from attnlab.training.lock import lock_run_dir
from attnlab.training.rundir import (
    check_run_dir_free,
    ddp_child_run_dir,
    external_world_size,
    is_rank_zero,
    load_config,
)
from attnlab.training.signals import RunInterrupted, policy

if TYPE_CHECKING:
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
        except OSError as err:  # a full disk: rank 0 names the file in one line (a rank's own no more)
            if not is_disk_full(err):
                raise
            sys.exit(1)
        return
    one_line_per_job()  # under -m: each job prints one line when it ends, the multirun a table
    run_hydra(train_job, "train")


def check_job(config: DictConfig, run_dir: Path | None, overrides: list[str]) -> PreparedRun:
    """All that can be checked before the run directory exists: types, rules between fields, the
    pretrained checkpoint of ``model.init_from``, the accelerators, the data's files (their heads), the
    run directory, and the checkpoint to resume from. ``run_dir`` is the directory Hydra will write
    into (None for a multirun's base config and its jobs before the first starts, checked without
    building their data but for a callback that checks it: the harness callback's task texts)."""
    check_teacher_run(config)  # task=distill: the teacher's file, family and task
    run = resolve_init_from(validate(config), explicit_model_keys(overrides))
    check_sweeper(config, run)
    check_machine(run)
    given = run_dir_given(config)
    if run_dir is None:  # a multirun's base config or one of its jobs: each job is checked again
        if given:
            raise ConfigError(
                "run_dir", run.run_dir, "a multirun writes one directory per job: set hydra.sweep.dir"
            )
        check_callbacks_data_of_job(run)  # the harness callback's task texts, before the sweep's folder
        return PreparedRun(run)
    if external_world_size() > 1 and not given:
        raise ConfigError(
            "run_dir",
            None,
            f"{external_world_size()} processes started by torchrun or SLURM must share one "
            "directory: give run_dir=<dir>",
        )
    max_steps_given = any(o.split("=", 1)[0].lstrip("+") == "trainer.max_steps" for o in overrides)
    return prepare_run(run, run_dir, max_steps_given)


def claim_run_dir(config: DictConfig, run_dir: Path | None) -> None:
    """Rank 0 holds the run directory (a multirun's sweep directory, which holds its jobs') from when
    its config is valid, before Hydra writes into it, to the end of the command: one run per
    directory (``training.lock``), and none in a folder that holds another run, unless it continues that
    run or ``run_dir_exists=overwrite`` (``check_job_dir``). The other ranks write into the directory
    their rank 0 holds."""
    if not is_rank_zero():
        return
    if run_dir is None:
        lock_run_dir(Path(config.hydra.sweep.dir), "hydra.sweep.dir")
    else:
        lock_run_dir(run_dir)
        check_job_dir(config, run_dir)


def check_job_dir(config: DictConfig, run_dir: Path) -> None:
    """ConfigError if ``run_dir`` holds another run that this one does not continue
    (``training.rundir.check_run_dir_free``)."""
    ckpt_path = OmegaConf.select(config, "ckpt_path", default=None)
    how = OmegaConf.select(config, "run_dir_exists", default="refuse")
    check_run_dir_free(run_dir, ckpt_path, how)


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
            if multirun and is_rank_zero():  # before its summary: another run's there stays whole
                check_job_dir(config, run_dir)
            with run_summary(run_dir) as summary:
                prepared = checked_by_validation(run_dir) or check_job(config, run_dir, overrides)
                name = run_name(prepared.run.run_name, overrides, run_dir.name, multirun)
                with peer_failure_said(run_dir, overrides):
                    score = train(
                        prepared, run_dir, group=group, summary=summary, name=name, multirun=multirun
                    )
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

    from attnlab.cli.hydra.jobs import record_job

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


if __name__ == "__main__":
    main()
