"""The command line around Hydra: a command run under ``hydra.main`` with the schemas registered
(``attnlab.run.configs``), and validation before any directory exists (``ValidateOnStart``). Bad input
ends in one line (``attnlab.run.bad_input``); a failed job and a multirun's table are
``attnlab.cli.hydra.jobs``'.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from attnlab.cli.hydra.command_line import before_composing
from attnlab.cli.hydra.hydra_shims import help_with_field_comments
from attnlab.cli.hydra.jobs import failed_jobs, job_rows, job_table
from attnlab.run.bad_input import (
    USER_ERRORS,
    ConfigRejected,
    DryRunDone,
    exit_before_the_run,
    full_traceback,
    one_line,
)
from attnlab.run.configs import register_schemas
from attnlab.run.prepared import PreparedRun
from attnlab.run.presets import config_dir
from attnlab.training.lock import unlock_run_dirs
from attnlab.training.signals import RunInterrupted, policy


def freeze_heap_at_exit() -> None:
    """Freeze the garbage collector's heap once every other exit handler has run (once per process).

    With torch, Lightning, Hydra and wandb imported, the interpreter's last collections walk millions of
    objects: 1.3-1.5 s between a command's last line and its exit, measured on a 2-core Xeon (0.2 s
    frozen). Nothing waits on them: files are written and closed by the jobs, log handlers are closed
    by ``logging``'s own exit handler, and wandb's service is finished by its exit handler, all of which
    run first (exit handlers run in the reverse order of their registration, and this one is
    registered before any of theirs but logging's, which flushes without the collector)."""
    if not getattr(freeze_heap_at_exit, "registered", False):
        atexit.register(gc.freeze)
        freeze_heap_at_exit.registered = True


def run_hydra(task_function: Callable[[DictConfig], float | None], config_name: str) -> None:
    """Run ``task_function`` under Hydra, after the few things the command reads of its command line
    first (``cli.hydra.command_line``); bad input ends the process with one ``error:`` line (status 2), a
    run that failed after it started with one line and its traceback in the log file (status 1)."""
    replaced = {}
    if config_name != "train":  # attnlab-train installs them itself, and names its own phases
        policy.reset()  # a command starts with no signal received (a process that runs commands in turn)
        replaced = policy.install()
        policy.phase = config_name
    before_composing(config_name)
    freeze_heap_at_exit()
    register_schemas()
    logging.raiseExceptions = (
        False  # a log file that cannot be written (a full disk) must not flood the console
    )
    asked = os.environ.get("HYDRA_FULL_ERROR")
    try:
        os.environ["HYDRA_FULL_ERROR"] = "1"
        main = hydra.main(config_path=str(config_dir()), config_name=config_name, version_base="1.3")
        with help_with_field_comments():  # --help fills only what its template shows, keys described
            main(task_function)()
    except DryRunDone:
        return
    except (*USER_ERRORS, ConfigRejected) as err:
        if full_traceback:
            raise
        print(f"error: {one_line(getattr(err, 'error', err))}", file=sys.stderr)
        sys.exit(2)
    except RunInterrupted as stop:  # training: a signal before the job began (composing, validating)
        if config_name == "train":
            exit_before_the_run(stop)
        print(f"interrupted by {stop}", file=sys.stderr)  # the other commands: in any phase
        sys.exit(stop.exit_code)
    finally:  # as the caller had it: a process that runs commands in turn (tests) passes on no "1"
        _checked.clear()  # a run that never started leaves nothing for the next command
        unlock_run_dirs()  # the run directories this command held (the kernel would at exit)
        policy.uninstall(replaced)
        if asked is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = asked
    if job_rows:
        print(job_table(job_rows))
        job_rows.clear()
    if failed_jobs:
        failed = list(failed_jobs)
        failed_jobs.clear()  # a process that runs commands in turn starts the next one with none
        print(f"error: {len(failed)} job(s) of the multirun failed:", *failed, sep="\n  ", file=sys.stderr)
        sys.exit(1)


# What ValidateOnStart's check returned for the run Hydra starts next, by its directory: Hydra runs a
# callback and then the task function in the same process, handing each the config and nothing else
# (a callback's return value goes nowhere), so the one validation's result waits here for its job.
_checked: dict[Path, object] = {}


def checked_by_validation(run_dir: Path) -> Any:
    """What validation returned for the run starting in ``run_dir`` (the job's to take, once); None
    where validation checked no run there (a multirun's job, checked in the job)."""
    return _checked.pop(run_dir.resolve(), None)


class ValidateOnStart(Callback):
    """Hydra callback: check the composed config before Hydra creates the run directory.

    ``check`` is the dotted path of a function ``(config, run_dir, overrides) -> object`` that raises
    ConfigError; ``run_dir`` is None for a multirun's base config. With ``check_jobs``, each job of a
    multirun (``cli.hydra.sweep_jobs``) is checked too, with ``run_dir`` None, before the first one starts;
    each job is checked again when it starts. ``claim``, the dotted path of a function ``(config,
    run_dir) -> None``, then takes the directory the command will write (``run_dir``, or the sweep's for
    a multirun) for this process, before Hydra writes into it; it raises ConfigError where it cannot.
    """

    def __init__(self, check: str, check_jobs: bool = False, claim: str | None = None) -> None:
        self.check = hydra.utils.get_method(check)
        self.check_jobs = check_jobs
        self.claim = hydra.utils.get_method(claim) if claim else None

    def on_run_start(self, config: DictConfig, **kwargs: object) -> None:
        run_dir = Path(config.hydra.run.dir)
        checked = self._check(config, run_dir)
        if OmegaConf.select(config, "dry_run", default=False):  # before the directory is claimed
            shown = checked.run if isinstance(checked, PreparedRun) else checked
            print(OmegaConf.to_yaml(OmegaConf.structured(shown)), end="")
            print("dry run: the config is valid; nothing was trained or written")
            raise DryRunDone
        self._claim(config, run_dir)
        _checked[Path(config.hydra.run.dir).resolve()] = checked  # where the claim put it (eval: a _2)

    def on_multirun_start(self, config: DictConfig, **kwargs: object) -> None:
        from attnlab.cli.hydra.sweep_jobs import swept_keys
        from attnlab.training.names import record_swept_keys

        record_swept_keys(swept_keys(config))  # the jobs (and their folders) are named by these
        self._check(config, None)
        if self.check_jobs:
            self._check_jobs(config)
        if OmegaConf.select(config, "dry_run", default=False):  # before the sweep's directory is claimed
            print("dry run: every job of the multirun is valid; nothing was trained")
            raise DryRunDone
        self._claim(config, None)

    def _claim(self, config: DictConfig, run_dir: Path | None) -> None:
        if self.claim is None:
            return
        try:
            self.claim(config, run_dir)
        except USER_ERRORS as err:
            raise ConfigRejected(err) from err

    def _check_jobs(self, config: DictConfig) -> None:
        """Each job of the multirun (each edge of a search space), named in the error of the first bad one."""
        from attnlab.cli.hydra.sweep_jobs import compose_job, sweep_jobs

        for name, overrides in sweep_jobs(config):
            try:
                self.check(compose_job(config, overrides), None, overrides)
            except USER_ERRORS as err:
                raise ConfigRejected(ValueError(f"{name}: {one_line(err, overrides)}")) from err

    def _check(self, config: DictConfig, run_dir: Path | None) -> object:
        """What the check returns (the validated config); ConfigRejected for bad input."""
        try:
            return self.check(config, run_dir, list(config.hydra.overrides.task))
        except USER_ERRORS as err:
            raise ConfigRejected(err) from err
