"""The command line around Hydra: the schemas in Hydra's config store, validation before any directory
exists, one-line errors for bad input, DDP/torchrun/SLURM ranks sharing one run directory, and a
multirun's table of its jobs and report of the failed ones.

Hydra is told to raise (``HYDRA_FULL_ERROR=1``) instead of printing its multi-line report, so that
composition errors (an unknown group choice or key) end in the same ``error: key=value: ...`` line
as the schema's. Set ``HYDRA_FULL_ERROR=1`` yourself to see full tracebacks.
"""

from __future__ import annotations

import atexit
import gc
import importlib.resources
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnlab.cli.help import fast_help
from attnlab.schema.commands import CompressCommand, ExplainCommand, ExportCommand, SampleCommand
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import UNIONS, config_error
from attnlab.schema.run import EvalConfig, RunConfig
from attnlab.training.files import DiskFullError, disk_full, is_disk_full
from attnlab.training.lock import unlock_run_dirs
from attnlab.training.rundir import is_rank_zero, rank_suffix
from attnlab.training.signals import RunInterrupted

# Errors that mean bad input (config, data, checkpoint): one line, no traceback, status 2.
USER_ERRORS = (
    ConfigError,
    HydraException,
    OmegaConfBaseException,
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
)
# The schema each command's primary config (conf/<name>.yaml) starts from.
COMMANDS = {
    "train": RunConfig,
    "eval": EvalConfig,
    "sample": SampleCommand,
    "explain": ExplainCommand,
    "compress": CompressCommand,
    "export": ExportCommand,
}
SCHEMA_NODE = "{}_schema"  # the name of a schema node in Hydra's config store; not a choice for users
log = logging.getLogger("attnlab")
failed_jobs: list[str] = []  # one line per job of this multirun that failed
job_rows: list[dict[str, str]] = []  # one row per job of this multirun, finished or failed: the final table
full_traceback = os.environ.get("HYDRA_FULL_ERROR") == "1"  # the user asked for tracebacks


def config_dir() -> Path:
    """The Hydra configs, installed with attnlab as the package ``attnlab.conf`` (``conf/`` of the
    repository), so the commands find them from any directory and in any kind of install."""
    return Path(str(importlib.resources.files("attnlab.conf")))


def presets(group: str) -> list[str]:
    """The options of ``group`` that ``conf/<group>/`` holds (not the schemas of the config store)."""
    return sorted(path.stem for path in (config_dir() / group).glob("*.yaml"))


def help_groups(command: str) -> str:
    """The groups section of ``--help`` (the resolver ``attnlab.help_groups``, in
    ``conf/hydra/help/attnlab.yaml``). Hydra's own lists the schema nodes of the config store
    (``model/gpt_schema``, ...) as if they were choices, and every group of ``conf/`` for the commands
    that read a checkpoint, which take none of them."""
    if not command.startswith("train"):  # train_rank<k> under torchrun
        return "(none: the model, data and tokenizer are the checkpoint's, ckpt_path=...)"
    groups = sorted(path.name for path in config_dir().iterdir() if path.is_dir() and path.name != "hydra")
    return "\n".join(f"{group}: {', '.join(presets(group))}" for group in groups if presets(group))


def register_schemas() -> None:
    """Put the schemas in Hydra's config store, so that every key exists (and is typed) before the
    groups and the command line are merged in: each command's (``train_schema``, ...), and each class
    of a tagged group (``model/gpt_schema``, ``pos/rope_schema``, ...), which the group's options in
    ``conf/`` start from. Also the resolvers that the configs' Hydra settings use."""
    store = ConfigStore.instance()
    for name, schema in COMMANDS.items():
        store.store(name=SCHEMA_NODE.format(name), node=schema)
    for union in UNIONS:
        group = union.group.rpartition(".")[2]  # model.pos: the pos group
        for tag, schema in union.schemas.items():
            store.store(group=group, name=SCHEMA_NODE.format(tag), node=schema)
    # Ranks > 0 of torchrun or SLURM write no Hydra files and log to <job>_rank<k>.log.
    OmegaConf.register_new_resolver(
        "attnlab.rank_zero", lambda v: v if is_rank_zero() else None, replace=True
    )
    OmegaConf.register_new_resolver("attnlab.rank_suffix", rank_suffix, replace=True)
    OmegaConf.register_new_resolver("attnlab.with_label", with_label, replace=True)
    OmegaConf.register_new_resolver("attnlab.help_groups", help_groups, replace=True)


def with_label(base: object, *, _root_: DictConfig) -> str:
    """The resolver ``${attnlab.with_label:<base>}`` of the run folders' names: ``<base>_<label>``
    (``training.names.folder_name``), from the command line of the config being resolved (or of the
    running job, for a config without its ``hydra`` node), so every rank and every reading agrees."""
    from attnlab.training.names import folder_name

    hydra_config = _root_.get("hydra") if "hydra" in _root_ else None
    if hydra_config is None and HydraConfig.initialized():
        hydra_config = HydraConfig.get()
    if hydra_config is None:  # composed outside a Hydra run (tests, notebooks): nothing to name it by
        return str(base)
    overrides = [str(o) for o in hydra_config.overrides.task]
    multirun = hydra_config.mode == RunMode.MULTIRUN
    return folder_name(str(base), _root_.get("run_name"), overrides, multirun)


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
    """Run ``task_function`` under Hydra; bad input ends the process with one ``error:`` line (status 2),
    a run that failed after it started with one line and its traceback in the log file (status 1)."""
    freeze_heap_at_exit()
    register_schemas()
    fast_help()  # --help fills only what its template shows, with each key's description
    logging.raiseExceptions = (
        False  # a log file that cannot be written (a full disk) must not flood the console
    )
    asked = os.environ.get("HYDRA_FULL_ERROR")
    try:
        os.environ["HYDRA_FULL_ERROR"] = "1"
        main = hydra.main(config_path=str(config_dir()), config_name=config_name, version_base="1.3")
        main(task_function)()
    except DryRunDone:
        return
    except (*USER_ERRORS, ConfigRejected) as err:
        if full_traceback:
            raise
        print(f"error: {one_line(getattr(err, 'error', err))}", file=sys.stderr)
        sys.exit(2)
    except RunInterrupted as stop:  # a signal before the job began (composing, validating)
        exit_before_the_run(stop)
    finally:  # as the caller had it: a process that runs commands in turn (tests) passes on no "1"
        unlock_run_dirs()  # the run directories this command held (the kernel would at exit)
        if asked is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = asked
    if job_rows:
        print(job_table(job_rows))
        job_rows.clear()
    if failed_jobs:
        print(
            f"error: {len(failed_jobs)} job(s) of the multirun failed:",
            *failed_jobs,
            sep="\n  ",
            file=sys.stderr,
        )
        sys.exit(1)


def exit_before_the_run(stop: RunInterrupted) -> NoReturn:
    """A signal before the run began: one line, nothing to resume, the signal's exit status."""
    print(f"interrupted by {stop}, before the run began", file=sys.stderr)
    sys.exit(stop.exit_code)


def one_line(err: BaseException, overrides: list[str] | None = None) -> str:
    """The message of ``err`` on one line, as ``key=value: what is allowed`` where it names a key.

    Read from the exception objects, never from their text: Hydra's missing group option (its
    options), and an OmegaConf error at composition (its key, the schema node there) about a value
    of the command line (the parsed override of that key in ``overrides``, default ``sys.argv``)."""
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and err.options:
        group, _, value = err.missing_cfg_file.rpartition("/")
        options = sorted(o for o in err.options if not o.endswith(SCHEMA_NODE.format("")))
        return f"{group}={value}: choose one of {', '.join(options)}"
    if isinstance(err, OverrideParseException):
        return f"{err.override}: not a valid override ({str(err).splitlines()[0]})"
    cause = err if isinstance(err, OmegaConfBaseException) else err.__cause__
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        value = override_value(cause.full_key, overrides)
        error = config_error(cause, value)
        if isinstance(value, Below):  # foo.bar=1 where foo is not a key: named as given
            error = ConfigError(f"{error.key}.{value.rest}", value.value, error.allowed)
        return str(error)
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("full_key:", "object_type=", "reference_type="))]
    return "; ".join(lines) or type(err).__name__


def override_value(key: str, overrides: list[str] | None = None) -> object:
    """The value ``overrides`` (default: the command line) give ``key`` (``logger.names[0]``: the first
    of its list), or ``?``. The last override of a key is the one composed (``max_steps=5 max_steps=ten``:
    ``ten``); an override of a key below it (``foo.bar=1`` for ``foo``) is shown whole."""
    name, _, index = key.partition("[")
    parser = OverridesParser.create()
    found: object = "?"
    for arg in sys.argv[1:] if overrides is None else overrides:
        with suppress(HydraException):
            override = parser.parse_override(arg)
            given = override.key_or_group.lstrip("+~")
            if override.is_delete():
                continue
            if given == name:
                value = override.value()
                found = value[int(index.rstrip("]"))] if index and isinstance(value, list) else value
            elif given.startswith(f"{name}.") and found == "?":
                found = Below(given[len(name) + 1 :], override.value())
    return found


@dataclass
class Below:
    """A value given to a key below the one an error names: ``foo.bar=1`` where ``foo`` is unknown."""

    rest: str
    value: object


class DryRunDone(BaseException):
    """``dry_run=true``: the config was validated (and printed) before any directory exists; the command
    ends there with status 0. A BaseException, for the reason ConfigRejected is one."""


class ConfigRejected(BaseException):
    """A bad config found by ValidateOnStart. A BaseException, because Hydra turns an Exception raised
    in a callback into a warning and goes on to create the run directory."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class ValidateOnStart(Callback):
    """Hydra callback: check the composed config before Hydra creates the run directory.

    ``check`` is the dotted path of a function ``(config, run_dir, overrides) -> object`` that raises
    ConfigError; ``run_dir`` is None for a multirun's base config. With ``check_jobs``, each job of a
    multirun (``cli.sweep_jobs``) is checked too, with ``run_dir`` None, before the first one starts;
    each job is checked again when it starts. ``claim``, the dotted path of a function ``(config,
    run_dir) -> None``, then takes the directory the command will write (``run_dir``, or the sweep's for
    a multirun) for this process, before Hydra writes into it; it raises ConfigError where it cannot.
    """

    def __init__(self, check: str, check_jobs: bool = False, claim: str | None = None) -> None:
        self.check = hydra.utils.get_method(check)
        self.check_jobs = check_jobs
        self.claim = hydra.utils.get_method(claim) if claim else None

    def on_run_start(self, config: DictConfig, **kwargs: object) -> None:
        checked = self._check(config, Path(config.hydra.run.dir))
        if OmegaConf.select(config, "dry_run", default=False):  # before the directory is claimed
            print(OmegaConf.to_yaml(OmegaConf.structured(checked)), end="")
            print("dry run: the config is valid; nothing was trained or written")
            raise DryRunDone
        self._claim(config, Path(config.hydra.run.dir))

    def on_multirun_start(self, config: DictConfig, **kwargs: object) -> None:
        from attnlab.cli.sweep_jobs import swept_keys
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
        from attnlab.cli.sweep_jobs import compose_job, sweep_jobs

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


@contextmanager
def user_errors_as_one_line() -> Iterator[None]:
    """Bad input (config, checkpoint, image) exits with status 2 and one ``error:`` line, no traceback."""
    try:
        yield
    except USER_ERRORS as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        sys.exit(2)


def run_job(job: Callable[[], float]) -> float | None:
    """Run one Hydra job; if it fails, its traceback goes to the run's log file and the console gets one
    line. A single run then exits with status 1; in a multirun the job is reported and returns None (no
    value: Optuna records the trial as failed), so the sweep goes on and the other jobs keep their results.
    """
    try:
        return job()
    except Exception as err:
        if full_traceback:
            raise
        log_traceback(err)
        hc = HydraConfig.get()
        where = f" (traceback in {Path(hc.runtime.output_dir) / f'{hc.job.name}.log'})"
        reason = error_line(err)
        if is_disk_full(err):  # the log file could not take the traceback either
            reason, where = disk_full_reason(err, Path(hc.runtime.output_dir)), ""
        if hc.mode != RunMode.MULTIRUN:
            print(f"error: {reason}{where}", file=sys.stderr)
            tell_torchrun(reason)
            sys.exit(1)
        message = f"job {hc.job.num} ({' '.join(hc.overrides.task)}) failed: {reason}{where}"
        print(f"error: {message}", file=sys.stderr)
        failed_jobs.append(message)
        if jobs_in_a_table():
            from attnlab.training.names import run_name

            name = run_name(None, list(hc.overrides.task), str(hc.job.num), multirun=True)
            record_job(
                {"job": str(hc.job.num), "run": name, "status": "failed", "folder": hc.runtime.output_dir}
            )
        return None


def tell_torchrun(reason: str) -> None:
    """Under torchrun, a failed process's one line goes into the error file its agent reads, so that the
    agent's report names the cause instead of a link on how to see a traceback."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        data = {"message": {"message": reason, "extraInfo": {"timestamp": str(int(time.time()))}}}
        with suppress(OSError):
            Path(path).write_text(json.dumps(data))


LAUNCHER_LOGGER = "hydra._internal.core_plugins.basic_launcher"


class DropJobLaunchLines(logging.Filter):
    """Drops Hydra's line per job launched (``#3 : pos=rope seed=2``), for a command whose jobs print
    one line each when they end (``attnlab-train -m``); its "Launching N jobs" line stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("\t#")


def one_line_per_job() -> None:
    """A multirun's jobs announce themselves when they end (``record_job``), not when Hydra launches
    them, and the multirun ends with their table (failed jobs included)."""
    if not jobs_in_a_table():
        logging.getLogger(LAUNCHER_LOGGER).addFilter(DropJobLaunchLines())


def jobs_in_a_table() -> bool:
    """Whether this command's multirun jobs end in a table (``one_line_per_job``)."""
    return any(isinstance(f, DropJobLaunchLines) for f in logging.getLogger(LAUNCHER_LOGGER).filters)


def record_job(row: dict[str, str]) -> None:
    """A row of the table a multirun prints when its last job is done (``job_table``)."""
    job_rows.append(row)


def job_table(rows: list[dict[str, str]]) -> str:
    """``rows`` as aligned text columns under a header: every column any row has, in order of appearance."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [columns, *([row.get(c, "") for c in columns] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells)


def error_line(err: BaseException) -> str:
    """How a failed job's error is shown (and kept in its summary.json): ``key=value: ...`` for bad
    input, the exception's type and message for anything else."""
    return one_line(err) if isinstance(err, USER_ERRORS) else f"{type(err).__name__}: {one_line(err)}"


def disk_full_reason(err: OSError, run_dir: Path) -> str:
    """What did not fit where: the file and the space it needed (DiskFullError says it), else the file."""
    if not isinstance(err, DiskFullError):
        err = disk_full(Path(err.filename) if err.filename else run_dir)
    return err.strerror


def log_traceback(err: BaseException) -> None:
    """Write the traceback of ``err`` to the log files only (the console gets one line)."""
    log_to_file(logging.ERROR, "the run failed:\n%s", "".join(traceback.format_exception(err)))


def log_to_file(level: int, message: str, *args: object) -> None:
    """A record for the run's log files only, where the console shows its own rendering of it."""
    record = log.makeRecord(log.name, level, __file__, 0, message, args, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
