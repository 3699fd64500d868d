"""What ``attnlab-eval`` lets a user choose, for its ``--help`` and its refusals: the data presets (which
replace the checkpoint's own data), the loggers, and the trainer presets that run in one process on
one device (those whose keys are all keys of ``EvalTrainerConfig``: today ``cpu`` and ``gpu``).

Hydra's own help lists every group of ``conf/`` and the schemas in its config store; eval's model
is the checkpoint's, and it has no task, optimiser, experiment or sweep to choose.
"""

from __future__ import annotations

from dataclasses import fields

from omegaconf import OmegaConf

from attnlab.run.eval_data import parse, values_of
from attnlab.run.presets import config_dir, presets
from attnlab.schema.errors import ConfigError
from attnlab.schema.eval import EvalTrainerConfig


def eval_trainers() -> list[str]:
    """The trainer presets whose every key attnlab-eval uses."""
    keys = {f.name for f in fields(EvalTrainerConfig)}
    folder = config_dir() / "trainer"
    return [name for name in presets("trainer") if set(OmegaConf.load(folder / f"{name}.yaml")) <= keys]


def refuse_other_trainers(args: list[str]) -> None:
    """``trainer=ddp`` (and the other multi-process presets) on attnlab-eval's command line: one line."""
    allowed = eval_trainers()
    for name in values_of("trainer", parse(args)):
        if name not in allowed:
            raise ConfigError(
                "trainer",
                name,
                f"attnlab-eval runs in one process on one device: choose one of {', '.join(allowed)}",
            )


def help_groups() -> str:
    """The groups section of ``attnlab-eval --help`` (the resolver ``attnlab.eval_groups``)."""
    return "\n".join(
        [
            f"data: {', '.join(presets('data'))}",
            "  (default: the checkpoint's own data; data=<preset> replaces it, data.<key>=... changes a key)",
            f"logger: {', '.join(presets('logger'))}",
            f"trainer: {', '.join(eval_trainers())}  (one process on one device)",
        ]
    )
