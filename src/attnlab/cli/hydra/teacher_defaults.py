"""The teacher of ``attnlab-train task=distill task.teacher=<ckpt>`` on the command line: its run's model
and data as the student's defaults, and its file, family and task checked against the composed student,
all before the run directory exists (``attnlab.run.teacher`` loads it and checks its outputs).

Why the teacher is read before Hydra composes (``attnlab.cli.hydra.command_line``, the one place that
reads the command line first, calls ``use_teacher_defaults``): the student's defaults are the teacher's model, data and objective, and
``model.n_layers=2`` must compose onto the teacher's model class. So ``with_teacher_defaults`` stores
the teacher's model and data configs in Hydra's config store as the options ``model/_teacher`` and
``data/_teacher`` and adds the overrides that choose them (and ``pos=<the teacher's>`` and
``task.objective=<the teacher's task>``) to the command line, each unless the command line chooses it
itself (``model=gpt-tiny``, ``data=shakespeare``). The student's ``model.*`` and ``data.*`` overrides
then apply on top, typed by the teacher's classes. The settings of the teacher's task (its
``label_smoothing``, ``monitor``, ...) are the student's defaults in the same way.

Why ``sys.argv`` is rewritten rather than the config completed after composing: Hydra chooses a
group's option only from the primary config's defaults list and the overrides that ``hydra.main``
reads from ``sys.argv`` (a defaults list's interpolations may name other groups' choices, not a value
read from a file the command line names). Composing the student untyped and swapping in the
teacher's classes afterwards would not do either: ``model.type_vocab_size=2`` for a bert teacher
must compose onto a bert node, not the default gpt one (an unknown key under Hydra's struct mode),
and Hydra saves the composed config (``.hydra/config.yaml``) before the job could change it. The
added overrides are recorded as implied, so that the run is named by what was typed.
"""

from __future__ import annotations

import sys
from dataclasses import fields, replace

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from attnlab.run.bad_input import user_errors_as_one_line
from attnlab.run.eval_data import chooses_preset, parse, values_of
from attnlab.run.teacher import teacher_run
from attnlab.schema.errors import ConfigError
from attnlab.schema.task import DistillTask, TaskConfig
from attnlab.training.names import record_implied_overrides

TEACHER_OPTION = "_teacher"  # the option of the model and data groups that holds the teacher's config


def use_teacher_defaults() -> None:
    """``sys.argv`` with the teacher's defaults (``with_teacher_defaults``), before Hydra reads it; a
    bad teacher ends the command with one line, before any directory exists. The run is named by
    what was typed: the overrides added here are recorded as implied (``training.names``)."""
    with user_errors_as_one_line():
        given = sys.argv[1:]
        sys.argv[1:] = with_teacher_defaults(given)
    ours = {f"{group}={TEACHER_OPTION}" for group in ("model", "data")}  # also when a resume repeats them
    record_implied_overrides([a for a in sys.argv[1:] if a not in given or a in ours])  # not in names


def with_teacher_defaults(args: list[str]) -> list[str]:
    """``args`` with the overrides that make the teacher's run the student's defaults (see the module's
    docstring); ``args`` unchanged unless they choose ``task=distill`` and name ``task.teacher``."""
    ours = {f"{group}={TEACHER_OPTION}" for group in ("model", "data")}
    args = [a for a in args if a not in ours]  # a resume command repeats them: chosen again below
    if "task=distill" not in args:  # nothing to read: leave every other command line to Hydra
        return args
    overrides = parse([a for a in args if "=" in a and not a.startswith("-")])  # not --cfg job etc.
    teachers = values_of("task.teacher", overrides)
    if not teachers:
        return args
    run = teacher_run(teachers[0])
    model = replace(run.model, init_from=None) if hasattr(run.model, "init_from") else run.model
    extra = []
    for group, node in (("model", model), ("data", run.data)):
        if not chooses_preset(overrides, group):
            ConfigStore.instance().store(group=group, name=TEACHER_OPTION, node=node)
            extra.append(f"{group}={TEACHER_OPTION}")
    pos = getattr(model, "pos", None)
    if pos is not None and not chooses_preset(overrides, "pos") and not chooses_preset(overrides, "model"):
        extra.append(f"pos={pos.name}")
    objective = run.task.inner()  # its settings (smoothing, monitor, ...) are the student's defaults too
    settings = {"objective": objective.name, **teacher_settings(objective)}
    extra += [
        f"task.{key}={value}" for key, value in settings.items() if not values_of(f"task.{key}", overrides)
    ]
    return [*extra, *args]  # before any option (--cfg job), which Hydra parses after its overrides


def teacher_settings(objective: TaskConfig) -> dict[str, object]:
    """The settings of the teacher's objective that ``task=distill`` has too (all but its name)."""
    ours = {f.name for f in fields(DistillTask)}
    return {
        f.name: getattr(objective, f.name) for f in fields(objective) if f.name in ours and f.name != "name"
    }


def check_teacher_run(config: DictConfig) -> None:
    """Before the student's config is validated: the teacher's file, and that its family and task are
    the student's (so a mismatch names the teacher, not a rule between the student's groups)."""
    if OmegaConf.select(config, "task.name") != DistillTask.name or not OmegaConf.select(
        config, "task.teacher"
    ):
        return
    path = config.task.teacher
    theirs = teacher_run(path)
    family = OmegaConf.select(config, "model.family")
    if theirs.model.family != family:
        raise ConfigError(
            "task.teacher",
            path,
            f"is a model.family={theirs.model.family} checkpoint; the student is model.family={family}: "
            "a teacher teaches a student of its own family",
        )
    objective, their_objective = OmegaConf.select(config, "task.objective"), theirs.task.inner().name
    if objective is not None and objective != their_objective:
        raise ConfigError(
            "task.objective",
            objective,
            f"the teacher {path} was trained on task {their_objective}: the student learns the same",
        )
