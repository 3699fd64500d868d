"""What a run prints: the resolved config as a tree, and where its results went; not Lightning's
advertisements and deprecation notices."""

from __future__ import annotations

import logging
import warnings

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.syntax import Syntax
from rich.tree import Tree

ORDER = ("model", "data", "task", "optim", "trainer", "logger", "checkpoint")


def config_tree(config: DictConfig) -> Tree:
    """One branch per group (model, data, ...), its settings as YAML; the scalar settings last."""
    tree = Tree("config", style="bold", guide_style="dim")
    groups = [k for k in ORDER if k in config] + [
        k for k in config if k not in ORDER and OmegaConf.is_dict(config[k])
    ]
    for key in groups:
        yaml = OmegaConf.to_yaml(config[key], resolve=True).rstrip()
        tree.add(key, style="bold cyan").add(Syntax(yaml, "yaml", background_color="default"))
    scalars = {k: config[k] for k in config if not OmegaConf.is_dict(config[k])}
    if scalars:
        yaml = OmegaConf.to_yaml(OmegaConf.create(scalars), resolve=True).rstrip()
        tree.add("run", style="bold cyan").add(Syntax(yaml, "yaml", background_color="default"))
    return tree


def print_config_tree(config: DictConfig) -> None:
    Console().print(config_tree(config))


def print_summary(lines: dict[str, str]) -> None:
    """``name: value`` lines at the end of a run (sample, run directory, checkpoints, metrics)."""
    console = Console()
    width = max(len(k) for k in lines)
    for name, value in lines.items():
        console.print(f"[bold]{name:<{width}}[/bold]  {value}", highlight=False, soft_wrap=True)


# The loggers through which Lightning prints its rank-zero messages, the tips among them.
LIGHTNING_LOGGERS = ("pytorch_lightning.utilities.rank_zero", "lightning_fabric.utilities.rank_zero")
# ... and the one through which every rank of a multi-process run (DDP, FSDP2, tensor parallel) says
# "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2"
LIGHTNING_INFO_LOGGERS = (*LIGHTNING_LOGGERS, "lightning_fabric.utilities.distributed")
TIP = "\N{ELECTRIC LIGHT BULB} Tip:"


class DropTips(logging.Filter):
    """Drops Lightning's advertising tips ("💡 Tip: ... try installing litlogger / litmodels")."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(TIP)


class LightningInfoToFileOnly(logging.Filter):
    """On a console handler: drops Lightning's INFO lines ("GPU available: False, used: False",
    "`Trainer.fit` stopped: `max_steps=300` reached.", "Restoring states from the checkpoint path at
    ...", each rank's "Initializing distributed: ..."), which the log file keeps; its warnings still
    show."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name not in LIGHTNING_INFO_LOGGERS


def quiet_lightning() -> None:
    """Silence the specific lines that clutter every command's output, and only those: Lightning's
    tips (a filter on its rank-zero loggers), its INFO lines on the console (``LightningInfoToFileOnly``
    on the root logger's console handlers; ``train.log`` keeps them) and the deprecation warning its
    pytree helper raises on recent torch (``isinstance(treespec, LeafSpec)``). Lightning's warnings and
    every other warning still show. Idempotent; called before a Trainer is built."""
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropTips) for f in logger.filters):
            logger.addFilter(DropTips())
    # Lightning's own console handler too, which it adds (and stops propagating) when imported before
    # any logging was set up (an embedding process)
    handlers = [
        h for name in ("", "pytorch_lightning", "lightning_fabric") for h in logging.getLogger(name).handlers
    ]
    for handler in handlers:
        console = isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
        if console and not any(isinstance(f, LightningInfoToFileOnly) for f in handler.filters):
            handler.addFilter(LightningInfoToFileOnly())
    warnings.filterwarnings(
        "ignore", r".*LeafSpec.* is deprecated", module=r"pytorch_lightning\.utilities\._pytree"
    )


def log_to_file(level: int, message: str, *args: object) -> None:
    """A record for the run's log files only, where the console shows its own rendering of it."""
    log = logging.getLogger("attnlab")
    record = log.makeRecord(log.name, level, __file__, 0, message, args, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
