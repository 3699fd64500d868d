"""The data an ``attnlab-eval`` job measures on: the checkpoint's own data config with the job's
``data.*`` overrides on top (``data.seq_len=512``, ``data.path=...``, ``data.batch_size=4``), or the
preset ``data=<name>`` chose; typed and checked by the schema before anything heavy starts.

Why the checkpoint is read before Hydra composes: under Hydra's struct mode ``data.seq_len=512``
composes only onto a typed ``data`` node, and the data's class (its kind) is known only from the
checkpoint, and Hydra chooses a group's option and types its keys only from what it holds when it
composes (the config store, ``conf/``, the command line), never from a value of the config being
composed (``ckpt_path``). So ``store_checkpoint_data`` reads ``ckpt_path`` from the parsed command line first and
stores that checkpoint's data config in Hydra's config store as the option ``data/_checkpoint``,
which conf/eval.yaml names as the default of its ``data`` group: the command line's ``data.*``
overrides are then typed and validated by Hydra against the checkpoint's own class, and
``data=<preset>`` replaces the node as any group choice does. A multirun over several checkpoints
(``-m ckpt_path=a,b data.seq_len=64,128``) composes against the first one; each job then applies
its own explicit ``data.*`` overrides to its own checkpoint's data (``job_run_config``), so the
checkpoints must share a data kind when ``data.*`` keys are overridden.

The model is the checkpoint's too (``model/_checkpoint``, the same way), and only its keys that hold
no weights may change (``schema.run.eval_may_change``: ``model.pos.rope_base=20000``, RoPE's
scaling to longer contexts, ``model.attn_backend=flex``, ``model.attn_window=64``); ``model=<preset>``
is refused. ``attnlab-sample`` stores the model the same way (``store_checkpoint_model``), for its
``model.*`` keys.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnlab.schema.checks import check_run, validate_saved
from attnlab.schema.data import DataConfig
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import config_error, plain, to_object
from attnlab.schema.run import RunConfig, eval_may_change
from attnlab.schema.rundir import check_checkpoint_file

CHECKPOINT_DATA = "_checkpoint"  # the option of the data group that holds the checkpoint's data config


def parse(args: list[str]) -> list[Override]:
    """Hydra's own reading of command-line overrides (sweeps, quoting and lists as Hydra sees them)."""
    return OverridesParser.create().parse_overrides([a for a in args if not a.startswith("-")])


def values_of(key: str, overrides: list[Override]) -> list[str]:
    """The values ``overrides`` give ``key``: one, several for a sweep ``key=a,b``, or none."""
    values: list[str] = []
    for override in overrides:
        if override.key_or_group == key and not override.is_delete():
            if override.is_sweep_override():
                values.extend(str(v) for v in override.sweep_string_iterator())
            else:
                values.append(str(override.value()))
    return values


def key_overrides(group: str, overrides: list[Override]) -> list[Override]:
    """The overrides of single keys of ``group`` (``data.seq_len=...``), not of the group itself."""
    return [o for o in overrides if o.key_or_group.startswith(f"{group}.")]


def chooses_preset(overrides: list[Override], group: str = "data") -> bool:
    """Whether the command line replaces the checkpoint's ``group`` by a preset (``data=shakespeare``)."""
    return any(o.key_or_group == group and not o.is_delete() for o in overrides)


def saved_run(ckpt_path: str) -> RunConfig:
    """The checked run config that a checkpoint of attnlab-train holds; ConfigError naming ckpt_path
    for a missing file, a file that is not such a checkpoint, or one without a run config."""
    from attnlab.training.resume import read_run_state

    check_checkpoint_file("ckpt_path", ckpt_path)
    saved = read_run_state(ckpt_path).get("config")
    if not saved:
        raise ConfigError(
            "ckpt_path", ckpt_path, "holds no attnlab run config: evaluate a checkpoint of attnlab-train"
        )
    return validate_saved(saved)


def store_checkpoint_data(args: list[str]) -> None:
    """Store the data config of the checkpoint(s) that ``args`` name as ``data/_checkpoint`` (see the
    module's docstring); nothing when no ``ckpt_path`` is given (Hydra then says it is required)."""
    overrides = parse(args)
    paths = values_of("ckpt_path", overrides)
    if not paths:
        return
    if chooses_preset(overrides, "model"):
        raise ConfigError("model", values_of("model", overrides)[0], "the model is the checkpoint's own")
    runs = [saved_run(path) for path in paths]
    for group in ("data", "model"):
        classes = {schema_classes(getattr(run, group)) for run in runs}
        if len(classes) > 1 and key_overrides(group, overrides) and not chooses_preset(overrides, group):
            raise ConfigError(
                "ckpt_path",
                ",".join(paths),
                f"checkpoints of differently shaped {group} configs cannot share {group}.* overrides; "
                "evaluate each in its own command",
            )
        ConfigStore.instance().store(group=group, name=CHECKPOINT_DATA, node=getattr(runs[0], group))


def store_checkpoint_model(args: list[str]) -> None:
    """attnlab-sample's ``model.*`` keys (``model.attn_backend=flex``): store the checkpoint's model config
    as ``model/_checkpoint`` for them to compose onto; nothing when no model key is given."""
    overrides = parse(args)
    if chooses_preset(overrides, "model"):
        raise ConfigError("model", values_of("model", overrides)[0], "the model is the checkpoint's own")
    paths = values_of("ckpt_path", overrides)
    if paths and key_overrides("model", overrides):
        ConfigStore.instance().store(group="model", name=CHECKPOINT_DATA, node=saved_run(paths[0]).model)


def model_changes(ckpt_path: str, composed: Any) -> dict[str, Any]:
    """The model keys (dotted) whose value in ``composed`` differs from the checkpoint's model, checked:
    each must hold no weights (``refuse_if_fixed``), and the changed model must pass its rules."""
    if composed is None:
        return {}
    changes = dict(changed_keys(plain(saved_run(ckpt_path).model), plain(composed), "model"))
    for key, value in changes.items():
        refuse_if_fixed(key, value)
    composed.check()
    return changes


def changed_keys(saved: dict, used: dict, prefix: str) -> list[tuple[str, Any]]:
    """The dotted keys (below ``prefix``) whose value in ``used`` differs from ``saved``, with it."""
    changed = []
    for key, value in used.items():
        if isinstance(value, dict) and isinstance(saved.get(key), dict):
            changed += changed_keys(saved[key], value, f"{prefix}.{key}")
        elif key not in saved or value != saved[key]:
            changed.append((f"{prefix}.{key}", value))
    return changed


def schema_classes(config: object) -> tuple[type, ...]:
    """The schema class of a group's config and of its positional encoding, if it has one: the keys
    an override may name."""
    return (type(config), type(getattr(config, "pos", None)))


def job_run_config(
    ckpt_path: str, args: list[str], composed: DataConfig | None
) -> tuple[RunConfig, RunConfig]:
    """The run a checkpoint was trained in, and the run this evaluation job measures: the same with the
    job's data (``composed``, where ``data=<preset>`` chose it; else the checkpoint's own data with the
    job's ``data.*`` overrides), checked by the rules between groups (``data.seq_len`` beyond what the
    model's learned positions hold names the limit)."""
    run = saved_run(ckpt_path)
    overrides = parse(args)
    if chooses_preset(overrides) and composed is not None:
        data = composed
    else:
        data = with_overrides("data", run.data, key_overrides("data", overrides))
    model = with_overrides("model", run.model, key_overrides("model", overrides))
    evaluated = replace(run, data=data, model=model)
    check_run(evaluated)
    return run, evaluated


def with_overrides(group: str, config: Any, overrides: list[Override]) -> Any:
    """``config`` (the checkpoint's ``group``) with ``<group>.<key>=<value>`` overrides applied, typed
    by its class; keys that the trained weights depend on are refused (``refuse_if_fixed``)."""
    root = OmegaConf.create({group: OmegaConf.structured(config)})
    OmegaConf.set_struct(root, True)
    for override in overrides:
        key, value = override.key_or_group, override.value()
        if override.is_delete():
            raise ConfigError(key, "~", "cannot be deleted at evaluation; give it a value")
        refuse_if_fixed(key, value)
        try:
            OmegaConf.update(root, key, value, merge=True)
        except OmegaConfBaseException as err:
            raise config_error(err, value) from None
    return to_object(root[group])


def refuse_if_fixed(key: str, value: object) -> None:
    """The tokenizer is the checkpoint's own (the embeddings index its vocabulary), and so is every
    model key that sets the weights' shapes or what they mean."""
    if key == "data.tokenizer":
        raise ConfigError(key, value, "the tokenizer is the checkpoint's own and cannot be changed")
    if key.startswith("model.") and not eval_may_change(key):
        raise ConfigError(
            key,
            value,
            "the trained weights depend on it; evaluation may change only model.pos.rope_*, "
            "model.attn_backend and model.attn_window",
        )
