"""The teacher of ``task=distill``: its checkpoint's run config read and checked (``teacher_run``), the
teacher loaded for the job (``teacher_of``), and its outputs checked against the student's data
(``check_teacher``). Its defaults on the command line are ``attnlab.cli.hydra.teacher_defaults``'.
"""

from __future__ import annotations

from typing import Any

from attnlab.schema.checks import validate_saved
from attnlab.schema.errors import ConfigError
from attnlab.schema.run import RunConfig
from attnlab.schema.rundir import check_checkpoint_file
from attnlab.schema.task import DistillTask


def teacher_run(path: str) -> RunConfig:
    """The checked run config of the teacher's checkpoint; ConfigError naming ``task.teacher`` for a
    missing file, a file that is not a checkpoint of attnlab-train, or one of attnlab-compress."""
    from attnlab.training.resume import read_run_state

    check_checkpoint_file("task.teacher", path)
    try:
        state = read_run_state(path)
    except ConfigError as err:  # it names ckpt_path; here the file is the teacher
        raise ConfigError("task.teacher", path, err.allowed) from None
    if state["compressed"]:
        raise ConfigError(
            "task.teacher",
            path,
            f"is a checkpoint of attnlab-compress method={state['compressed']}: distil from the checkpoint "
            "of attnlab-train it was made from",
        )
    if not state.get("config"):
        raise ConfigError(
            "task.teacher", path, "holds no attnlab run config: give a checkpoint of attnlab-train"
        )
    return validate_saved(state["config"])


def check_teacher(run: RunConfig, datamodule: Any) -> Any:
    """After the student's data is built: the teacher (loaded now, returned for the job; None unless
    ``task=distill``) and the student predict the same tokens or classes."""
    teacher = teacher_of(run)
    if teacher is not None:
        check_outputs_match(run, teacher, datamodule)
    return teacher


def check_outputs_match(run: RunConfig, teacher: Any, datamodule: Any) -> None:
    """The teacher's logits and the student's must index the same tokens or classes."""
    from attnlab.tasks.base import tokenizer_files

    path, theirs = run.task.teacher, teacher.model.cfg
    vocab, their_vocab = (
        getattr(run.model, "vocab_size", 0) or datamodule.vocab_size,
        getattr(theirs, "vocab_size", 0),
    )
    if their_vocab != vocab:
        raise ConfigError(
            "task.teacher",
            path,
            f"its vocabulary has {their_vocab} tokens, the student's {vocab}: train the student "
            "with the teacher's data and tokenizer",
        )
    if teacher.tokenizer is not None and tokenizer_files(teacher.tokenizer) != tokenizer_files(
        datamodule.tokenizer
    ):
        raise ConfigError(
            "task.teacher",
            path,
            "its tokenizer differs from the one the student's data gives: train the student with the "
            "teacher's data and tokenizer",
        )
    classes = getattr(run.model, "num_classes", 0) or datamodule.num_classes
    if run.task.inner().data_needs.classes and theirs.num_classes != classes:
        raise ConfigError(
            "task.teacher",
            path,
            f"it predicts {theirs.num_classes} classes, the student {classes}: train the student on the "
            "teacher's data",
        )


def teacher_of(run: RunConfig) -> Any:
    """The teacher's task module in eval mode, loaded now (None unless ``task=distill``)."""
    if not isinstance(run.task, DistillTask):
        return None
    return load_teacher(run.task.teacher)


def load_teacher(path: str) -> Any:
    from attnlab.checkpoint import load_task_from_checkpoint

    return load_task_from_checkpoint(path)
