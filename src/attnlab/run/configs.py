"""A command's config composed as its command line composes it (Hydra's compose API over attnlab's
``conf/`` and schemas), then typed: nothing runs and no directory is made. The schemas and resolvers
the configs need are registered here (``register_schemas``), for the commands and for library callers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from attnlab.run.bad_input import SCHEMA_NODE
from attnlab.run.eval_data import CHECKPOINT_DATA
from attnlab.run.presets import config_dir, presets
from attnlab.run.pretrained import explicit_model_keys, resolve_init_from
from attnlab.schema.checks import validate
from attnlab.schema.commands import CompressCommand, ExplainCommand, ExportCommand, SampleCommand
from attnlab.schema.eval import EvalConfig
from attnlab.schema.load import UNIONS, to_object
from attnlab.schema.run import RunConfig
from attnlab.training.rundir import is_rank_zero, rank_suffix

# The schema each command's primary config (conf/<name>.yaml) starts from.
COMMANDS = {
    "train": RunConfig,
    "eval": EvalConfig,
    "sample": SampleCommand,
    "explain": ExplainCommand,
    "compress": CompressCommand,
    "export": ExportCommand,
}


def compose(command: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config of ``attnlab-<command> <overrides>`` (``train``, ``eval``, ``sample``, ``explain``,
    ``compress``, ``export``), without Hydra's own ``hydra`` node."""
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return hydra_compose(command, overrides=list(overrides))


def run_config(overrides: Sequence[str] = ()) -> RunConfig:
    """The validated run of ``attnlab-train <overrides>``: types, the rules between fields, and the
    pretrained model of ``model.init_from`` read; ConfigError naming the key where one is bad."""
    return resolve_init_from(validate(compose("train", overrides)), explicit_model_keys(list(overrides)))


def command_config(command: str, overrides: Sequence[str] = ()) -> Any:
    """The typed, checked config of a command that reads a checkpoint (``SampleCommand`` for
    ``sample``, ``ExplainCommand``, ``CompressCommand``, ``ExportCommand``)."""
    config = to_object(compose(command, overrides))
    if hasattr(config, "check"):
        config.check()
    return config


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
    groups and the command line are merged in: each command's schema (``train_schema``, ...), each
    class of a tagged group (``model/gpt_schema``, ``pos/rope_schema``, ...), which the group's options
    in ``conf/`` start from, and the untyped ``data/_checkpoint`` and ``model/_checkpoint`` that the
    commands reading a checkpoint compose ``data.*`` and ``model.*`` onto, typed afterwards by the
    checkpoint's classes (``attnlab.run.eval_data``). Also the resolvers the configs' Hydra settings use."""
    store = ConfigStore.instance()
    for name, schema in COMMANDS.items():
        store.store(name=SCHEMA_NODE.format(name), node=schema)
    for group in ("data", "model"):  # attnlab-eval's and -sample's: the checkpoint's, typed after composing
        store.store(group=group, name=CHECKPOINT_DATA, node=OmegaConf.create({}, flags={"struct": False}))
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
