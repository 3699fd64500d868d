"""A run prepared: checked against this machine (``check_machine``) and its directory
(``prepare_run``), with the data module (and teacher) that checking it built; and the model built for it.

The data module is built once: by validation, before the run directory exists (so that data that
does not fit the model stops the run with one line and nothing written), then trained on by the job
(``PreparedRun``, which validation returns).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab.run.budget import with_budget_steps
from attnlab.run.devices import check_attention_backend, check_devices, check_float8, check_strategy
from attnlab.run.pretrained import FREE_MODEL_FIELDS
from attnlab.run.teacher import check_teacher
from attnlab.schema.errors import ConfigError
from attnlab.schema.run import RunConfig, Strategy
from attnlab.training.rundir import resolve_ckpt_path
from attnlab.training.targets import check_targets

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class PreparedRun:
    """A run checked against this machine and its directory, with what checking it built: the data
    module (its files read whole, its tokenizer built, checked against the model) and, for
    ``task=distill``, the teacher (loaded, checked against the student). None where nothing was built
    (a multirun's base config, checked before its jobs): the job then builds its own."""

    run: RunConfig
    datamodule: Any = None
    teacher: Any = None


def build_datamodule_for(run: RunConfig) -> Any:
    """The run's data module, built and set up: its files read whole, its tokenizer built, and checked
    against the model (``model.vocab_size`` against the tokenizer, ``model.num_classes`` against the
    labels, ``data.seq_len`` against the longest example, the monitored metric logged)."""
    from attnlab.data import build_datamodule

    datamodule = build_datamodule(
        run.data, needs=run.task.inner().data_needs, seed=run.seed, model_cfg=run.model
    )
    datamodule.setup("fit")
    check_monitor_logged(run, datamodule)
    from attnlab.training.targets import check_callbacks_data

    check_callbacks_data(run, datamodule)
    return datamodule


def check_monitor_logged(run: RunConfig, datamodule: Any) -> None:
    """``task.monitor=val/bpb`` needs a tokenizer that fixes each token's bytes (``Tokenizer.token_bytes``):
    with any other, validation logs no bits per byte, and the run would fail at its first checkpoint."""
    tokenizer = datamodule.tokenizer
    if run.task.monitor == "val/bpb" and (tokenizer is None or tokenizer.token_bytes() is None):
        raise ConfigError(
            "task.monitor",
            run.task.monitor,
            f"the tokenizer (data.tokenizer={run.data.tokenizer!r}) does not fix the bytes each token covers "
            "(words split at whitespace, or an unknown token), so no bits per byte is logged; monitor val/loss",
        )


def build_model_for(run: RunConfig, datamodule: Any) -> nn.Module:
    """The model of ``run.model`` completed from the data and the task: the vocabulary size, the
    number of classes, and only the heads the task trains (a masked-LM head only for ``mlm``)."""
    from attnlab.models import MODEL_CLASSES, build_model
    from attnlab.models.hf import load_hf
    from attnlab.run.families import FAMILY_COMMANDS

    cfg = run.model
    updates: dict[str, Any] = FAMILY_COMMANDS.of(cfg).model_updates(run.task.inner())
    if MODEL_CLASSES.of(cfg).input_kind == "tokens" and cfg.vocab_size == 0:
        updates["vocab_size"] = datamodule.vocab_size
    if run.task.inner().data_needs.classes and cfg.num_classes == 0:
        updates["num_classes"] = datamodule.num_classes
    if MODEL_CLASSES.of(cfg).input_kind == "images" and cfg.channels == 0:
        updates["channels"] = datamodule.channels
    if cfg.init_from:  # every field the run may set on a pretrained model reaches it (FREE_MODEL_FIELDS)
        free = {
            k: getattr(cfg, k)
            for k in FREE_MODEL_FIELDS
            if k != "init_from" and hasattr(cfg, k) and k not in updates
        }
        model = load_hf(cfg.init_from, **free, **updates)
    else:
        model = build_model(replace(cfg, **updates))
    return speed_up(model, run)


def speed_up(model: nn.Module, run: RunConfig) -> nn.Module:
    """``model`` with the run's engines applied, in torchtitan's order: float8 projections
    (``trainer.float8``), then activation checkpointing per layer, then compilation (``compile``: the
    whole model, or each layer on its own), so that each layer is compiled with what it will run;
    under ``trainer.strategy=fsdp2`` the task shards the result."""
    from attnlab.models.speedups import checkpoint_layers, compile_layers, convert_to_float8

    if run.trainer.float8:
        convert_to_float8(
            model,
            emulate=run.trainer.float8 == "emulated",
            sharded=run.trainer.strategy == Strategy.fsdp2,
        )
    if run.trainer.activation_checkpointing != "none":
        checkpoint_layers(model, selective=run.trainer.activation_checkpointing == "selective")
    if run.compile == "block":
        compile_layers(model)
    elif run.compile:
        model.compile()
    return model


def check_machine(run: RunConfig) -> None:
    """The run against this machine: its accelerators, strategy, float8 and attention backend, the
    targets it names, and the heads of its data's files."""
    from attnlab.data import check_source

    check_devices(run.trainer)
    check_strategy(run.trainer)
    check_float8(run.trainer)
    check_attention_backend(run)
    check_targets(run)
    check_source(run.data, run.model)


def check_callbacks_data_of_job(run: RunConfig) -> None:
    """A multirun's job, checked before the sweep's folder exists (it builds its data module only when
    it starts, in that folder): where a callback checks the data it will read (``check_data``: the
    harness callback's task texts against the run's tokenizer), the job's data module is built for that
    check here. Only runs with such a callback pay for it."""
    from attnlab.training.targets import callbacks_check_data

    if callbacks_check_data(run):
        build_datamodule_for(run)  # checks the callbacks' data


def prepare_run(run: RunConfig, run_dir: Path, max_steps_given: bool = False) -> PreparedRun:
    """A validated ``run`` made ready to train into ``run_dir``: its checkpoint to resume from found
    there, its data module built and checked against the model, its step budget counted, the resume
    checked (``max_steps_given``: trainer.max_steps was set on the command line, which a compute budget
    may not override), and the teacher of ``task=distill`` loaded and checked."""
    from attnlab.training.resume import check_resume

    run = replace(run, ckpt_path=resolve_ckpt_path(run.ckpt_path, run_dir))
    datamodule = build_datamodule_for(run)
    run = with_budget_steps(run, datamodule, max_steps_given)  # before check_resume compares the steps
    check_resume(run)
    return PreparedRun(run, datamodule, check_teacher(run, datamodule))
