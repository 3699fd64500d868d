"""The data module of a run, built once, and the model built for it.

The data module is built once: by validation, before the run directory exists (so that data
that does not fit the model stops the run with one line and nothing written), then taken by the job
(``Handoff``: why Hydra forces a module-level slot for it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from attnlab.cli.pretrained import FREE_MODEL_FIELDS
from attnlab.schema.errors import ConfigError
from attnlab.schema.run import RunConfig, Strategy

if TYPE_CHECKING:
    from torch import nn

T = TypeVar("T")


class Handoff(Generic[T]):
    """One thing that validation built for the job that follows, kept until the job takes it.

    Why Hydra forces a slot at module level: the only code Hydra runs before it creates the run
    directory is a callback (``ValidateOnStart``'s ``on_run_start``), and it runs the callback and
    then the task function in the same process, handing each the config and nothing else (a
    callback's return value goes nowhere). What validation had to build to check the run (the data
    module, its files read whole; the teacher, loaded) waits here, keyed by what it was built from,
    so that the job does not build it twice. A job that finds nothing under its key (a multirun's
    job, a DDP child process, a direct call of ``attnlab.cli.train.train``) builds its own.
    """

    def __init__(self) -> None:
        self.kept: tuple[Hashable, T] | None = None

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """What was built for ``key``, or ``build()`` now, kept in place of anything built for another."""
        if self.kept is None or self.kept[0] != key:
            self.kept = None  # the old one is not kept alive while the new one is built
            self.kept = (key, build())
        return self.kept[1]

    def take(self, key: Hashable, build: Callable[[], T]) -> T:
        """``get``, after which nothing is kept: a multirun's next job does not keep this one's alive."""
        value = self.get(key, build)
        self.kept = None
        return value


_datamodules: Handoff[Any] = Handoff()


def prepare_datamodule(run: RunConfig) -> Any:
    """The run's data module, built and set up: its files read whole, its tokenizer built, and checked
    against the model (``model.vocab_size`` against the tokenizer, ``model.num_classes`` against the
    labels, ``data.seq_len`` against the longest example). Validation calls it, so that bad data stops
    the run before its directory exists; the job that follows takes the same module
    (``take_datamodule``) instead of building it again."""
    key = (run.data, run.model, run.task.inner().name, run.seed)
    return _datamodules.get(key, lambda: build_datamodule_for(run))


def build_datamodule_for(run: RunConfig) -> Any:
    from attnlab.data import build_datamodule

    datamodule = build_datamodule(
        run.data, needs=run.task.inner().data_needs, seed=run.seed, model_cfg=run.model
    )
    datamodule.setup("fit")
    check_monitor_logged(run, datamodule)
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


def take_datamodule(run: RunConfig) -> Any:
    """The data module ``prepare_datamodule`` built for ``run`` (built now if it did not), which the
    module then no longer holds: a multirun's next job does not keep this one's data alive."""
    key = (run.data, run.model, run.task.inner().name, run.seed)
    return _datamodules.take(key, lambda: build_datamodule_for(run))


def build_model_for(run: RunConfig, datamodule: Any) -> nn.Module:
    """The model of ``run.model`` completed from the data and the task: the vocabulary size, the
    number of classes, and only the heads the task trains (a masked-LM head only for ``mlm``)."""
    from attnlab.cli.families import FAMILY_COMMANDS
    from attnlab.models import MODEL_CLASSES, build_model
    from attnlab.models.hf import load_hf

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
