"""The data an ``attnlab-eval`` job measures on: the checkpoint's own data config with the job's
``data.*`` overrides on top (``data.seq_len=512``, ``data.path=...``, ``data.batch_size=4``), or the
preset ``data=<name>`` chose; typed and checked by the schema before anything heavy starts.

Composed untyped, typed after, as a saved config is read (``schema.load.read_run_config``): the data's
class (its kind) is known only from the checkpoint, a value of the config being composed, and Hydra
types keys only by what it holds when it composes. So conf/eval.yaml's ``data`` defaults to the untyped,
open node ``data/_checkpoint`` (registered with the schemas, ``cli.hydra.app.register_schemas``): Hydra
composes ``data.seq_len=512`` onto it as a plain key, and ``job_run_config`` then applies the job's
``data.*`` overrides to the checkpoint's own data, typed by the class its tag picks, so a key that
class lacks or a value it refuses is one line naming the key, before any directory exists.
``data=<preset>`` replaces the node as any group choice does (the preset is typed by its own schema).
Each job of a multirun (``-m ckpt_path=a,b data.seq_len=64,128``) applies its overrides to its own
checkpoint's data.

The model is the checkpoint's too (``model/_checkpoint``, the same way), and only its keys that hold
no weights may change (``schema.eval.eval_may_change``: ``model.pos.rope_base=20000``, RoPE's
scaling to longer contexts, ``model.attn_backend=flex``, ``model.attn_window=64``); ``model=<preset>``
is refused before composing (a model preset's defaults list chooses the task and data groups that
these commands lack: ``attnlab.cli.hydra.command_line``). ``attnlab-sample`` reads its ``model.*`` keys the
same way (``model_changes``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnlab.schema.checks import check_run
from attnlab.schema.errors import ConfigError
from attnlab.schema.eval import eval_may_change
from attnlab.schema.load import config_error, plain, read_run_config, to_object
from attnlab.schema.run import RunConfig
from attnlab.schema.rundir import check_checkpoint_file

CHECKPOINT_DATA = "_checkpoint"  # the untyped option of the data and model groups: the checkpoint's own


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
    for a missing file, a file that is not such a checkpoint, or one without a run config. Each call
    reads the file: a command reads it once and passes the run on (``job_run_config``)."""
    check_checkpoint_file("ckpt_path", ckpt_path)
    run = read_saved_run(ckpt_path)
    check_run(run)  # a rule may look beyond the file (a data path that must exist)
    return run


def read_saved_run(ckpt_path: str) -> RunConfig:
    """The run config that a checkpoint of attnlab-train holds, typed (not yet checked); ConfigError
    naming ckpt_path for a file that is not such a checkpoint, or one without a run config."""
    from attnlab.training.resume import read_run_state

    saved = read_run_state(ckpt_path).get("config")
    if not saved:
        raise ConfigError(
            "ckpt_path", ckpt_path, "holds no attnlab run config: evaluate a checkpoint of attnlab-train"
        )
    return read_run_config(saved)


def refuse_model_preset(args: list[str]) -> None:
    """``model=<preset>`` on attnlab-eval's or attnlab-sample's command line: the model is the
    checkpoint's own (only its keys without weights change)."""
    overrides = parse(args)
    if chooses_preset(overrides, "model"):
        raise ConfigError("model", values_of("model", overrides)[0], "the model is the checkpoint's own")


def model_changes(ckpt_path: str, args: list[str]) -> dict[str, Any]:
    """The model keys (dotted) that the ``model.*`` overrides of ``args`` change in the checkpoint's
    model, checked: each must hold no weights (``refuse_if_fixed``), and the changed model must pass
    its rules; {} without such overrides (the checkpoint is then not read here). ``model=<preset>``
    was refused before composing (``refuse_model_preset``)."""
    given = key_overrides("model", parse(args))
    if not given:
        return {}
    saved = saved_run(ckpt_path).model
    composed = with_overrides("model", saved, given)
    composed.check()
    return dict(changed_keys(plain(saved), plain(composed), "model"))


def changed_keys(saved: dict, used: dict, prefix: str) -> list[tuple[str, Any]]:
    """The dotted keys (below ``prefix``) whose value in ``used`` differs from ``saved``, with it."""
    changed = []
    for key, value in used.items():
        if isinstance(value, dict) and isinstance(saved.get(key), dict):
            changed += changed_keys(saved[key], value, f"{prefix}.{key}")
        elif key not in saved or value != saved[key]:
            changed.append((f"{prefix}.{key}", value))
    return changed


def job_run_config(ckpt_path: str, args: list[str], composed: Any) -> tuple[RunConfig, RunConfig]:
    """The run a checkpoint was trained in, and the run this evaluation job measures: the same with the
    job's data (``composed``, the typed preset where ``data=<preset>`` chose it; else the checkpoint's
    own data with the job's ``data.*`` overrides) and model keys, checked by the rules between groups (``data.seq_len`` beyond what the
    model's learned positions hold names the limit)."""
    overrides = parse(args)
    run = saved_run(ckpt_path)
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
