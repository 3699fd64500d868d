"""The classes a run's config names by ``_target_`` (its Trainer, extra callbacks), checked before the
run directory exists: one line naming the key, instead of an error from ``instantiate`` mid-run."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from attnlab.schema.errors import ConfigError
from attnlab.schema.run import RunConfig, TrainerConfig


def check_targets(run: RunConfig) -> None:
    """``trainer._target_`` names a Lightning Trainer, each ``callbacks.<name>._target_`` a Callback.
    Each class is imported first, Lightning only then (to compare), and only when there is something
    other than the default Trainer to check: a path that names nothing fails fast."""
    targets = [
        (f"callbacks.{name}._target_", c["_target_"], "Callback") for name, c in run.callbacks.items() if c
    ]
    if run.trainer._target_ != TrainerConfig._target_:
        targets.append(("trainer._target_", run.trainer._target_, "Trainer"))
    check_classes(targets)
    for name, c in run.callbacks.items():  # a class that checks its own arguments (HarnessEvaluation)
        cls = target_class(f"callbacks.{name}._target_", c["_target_"], "Callback") if c else None
        if cls is None:
            continue
        check_arguments(f"callbacks.{name}", cls, c)
        check_trainer = getattr(cls, "check_trainer", None)  # and the trainer it can work under
        if check_trainer is not None:
            check_trainer(f"callbacks.{name}", run.trainer)
        check_model = getattr(cls, "check_model", None)  # and the models it can work on
        if check_model is not None:
            check_model(f"callbacks.{name}", run.model)
        check = getattr(cls, "check_config", None)
        if check is not None:
            check(f"callbacks.{name}", {k: v for k, v in c.items() if k != "_target_"})


def check_arguments(key: str, cls: Any, config: Any) -> None:
    """The arguments of ``config`` (Hydra's own ``_target_``, ``_partial_``, ... left out) are ones that
    ``cls`` takes, and every argument it requires is given: ConfigError naming ``<key>.<argument>``."""
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # a class whose signature Python cannot read: nothing to compare
        return
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return
    given = {k: v for k, v in config.items() if not str(k).startswith("_")}
    named = [n for n, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for name, value in given.items():
        if name not in named:
            raise ConfigError(
                f"{key}.{name}",
                value,
                f"not an argument of {cls.__name__}; it takes {', '.join(named) or 'none'}",
            )
    for name in named:
        if parameters[name].default is inspect.Parameter.empty and name not in given:
            raise ConfigError(f"{key}.{name}", None, f"required by {cls.__name__}: give it")


def check_trainer_target(path: str) -> None:
    """``trainer._target_`` of a command other than training (attnlab-eval) names a Lightning Trainer."""
    if path != TrainerConfig._target_:
        check_classes([("trainer._target_", path, "Trainer")])


def check_classes(targets: list[tuple[str, Any, str]]) -> None:
    """Each ``(key, dotted path, Lightning base class name)`` imports and is a subclass of that base."""
    found = [(key, path, kind, target_class(key, path, kind)) for key, path, kind in targets]
    if not found:
        return
    import pytorch_lightning as pl

    for key, path, kind, cls in found:
        if not isinstance(cls, type) or not issubclass(cls, getattr(pl, kind)):
            raise ConfigError(key, path, f"{allowed(kind)}; {path.rpartition('.')[2]} is not one")


def allowed(kind: str) -> str:
    return f"the import path of a {kind} subclass (package.module.Class)"


def target_class(key: str, path: Any, kind: str) -> object:
    """What the dotted ``path`` names, imported."""
    if not isinstance(path, str):
        raise ConfigError(key, path, allowed(kind))
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:  # ValueError: no module part
        raise ConfigError(key, path, f"{allowed(kind)}; not importable ({type(err).__name__})") from None


def check_callbacks_data(run: RunConfig, datamodule: Any) -> None:
    """Each callback class with a ``check_data(key, config, datamodule)`` checks the data it will read,
    once the data module is built and before the run directory exists (HarnessEvaluation: its tasks'
    texts against the run's tokenizer)."""
    for name, c in run.callbacks.items():
        cls = target_class(f"callbacks.{name}._target_", c["_target_"], "Callback") if c else None
        check = getattr(cls, "check_data", None)
        if check is not None:
            check(f"callbacks.{name}", {k: v for k, v in c.items() if k != "_target_"}, datamodule)


def callbacks_check_data(run: RunConfig) -> bool:
    """Whether a callback of the run checks the data it will read (``check_data``)."""
    return any(
        hasattr(target_class(f"callbacks.{name}._target_", c["_target_"], "Callback"), "check_data")
        for name, c in run.callbacks.items()
        if c
    )
