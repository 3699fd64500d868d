"""Build a task module from configs, and rebuild one from an attnlab checkpoint."""

from __future__ import annotations

import os
import tempfile
import zipfile
from dataclasses import fields

import pytorch_lightning as pl
import torch
from torch import nn

from attnlab.config import ModelConfig, PosConfig
from attnlab.models import build_model
from attnlab.tasks.base import CHECKPOINT_KEY, TaskModule
from attnlab.tasks.causal_lm import CausalLMTask
from attnlab.tasks.classification import ClassificationTask
from attnlab.tasks.mlm import MaskedLMTask
from attnlab.tasks.schema import TASKS, OptimConfig, TaskConfig, validate_optim_config, validate_task_config
from attnlab.tasks.seq2seq import Seq2SeqTask

TASK_CLASSES: dict[str, type[TaskModule]] = {
    "causal_lm": CausalLMTask,
    "mlm": MaskedLMTask,
    "seq2seq": Seq2SeqTask,
    "classification": ClassificationTask,
}


def build_task(
    cfg: TaskConfig,
    optim: OptimConfig,
    model: nn.Module,
    *,
    tokenizer: object = None,
    num_classes: int = 0,
    max_steps: int,
) -> pl.LightningModule:
    """The task module ``cfg.name`` around ``model``.

    ``num_classes`` is the data's class count (0: not known); for classification it must match
    the classifier the model was built with. ``max_steps`` is the trainer's step budget, which
    the ``cosine`` and ``linear`` schedules decay over unless ``optim.max_steps`` is set.
    """
    if cfg.name not in TASK_CLASSES:
        raise ValueError(f"task.name={cfg.name!r} is not a task; choose one of {', '.join(TASKS)}")
    validate_task_config(cfg, model.cfg.family)
    validate_optim_config(optim)
    if cfg.name == "classification" and model.cfg.num_classes < 2:
        raise ValueError(
            f"model.num_classes={model.cfg.num_classes}: classification needs at least 2 classes"
        )
    if cfg.name == "classification" and num_classes and num_classes != model.cfg.num_classes:
        raise ValueError(
            f"model.num_classes={model.cfg.num_classes} does not match the data's {num_classes} classes"
        )
    if cfg.name == "mlm" and not model.cfg.mlm_head:
        raise ValueError("model.mlm_head=false: task.name='mlm' needs the encoder's masked-LM head")
    return TASK_CLASSES[cfg.name](model, cfg, optim, max_steps=max_steps, tokenizer=tokenizer)


def load_task_from_checkpoint(
    path: str | os.PathLike, map_location: str | torch.device = "cpu"
) -> TaskModule:
    """The task module saved in an attnlab Lightning checkpoint, in eval mode.

    The model is rebuilt from the saved ModelConfig (``attnlab.models.build_model``) and its
    weights loaded; the tokenizer saved with it, if any, is restored as ``task.tokenizer``.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    checkpoint = _read(path, map_location)
    saved = checkpoint.get(CHECKPOINT_KEY) if isinstance(checkpoint, dict) else None
    if not isinstance(saved, dict) or "state_dict" not in checkpoint:
        found = sorted(checkpoint)[:8] if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise ValueError(
            f"{path!r} is not an attnlab checkpoint: it has no {CHECKPOINT_KEY!r} entry and state_dict "
            f"(found {found}); attnlab-train writes them"
        )
    model_cfg = _dataclass(ModelConfig, saved["model"], path)
    model = build_model(model_cfg)
    task = build_task(
        _dataclass(TaskConfig, saved["task"], path),
        _dataclass(OptimConfig, saved["optim"], path),
        model,
        tokenizer=_restore_tokenizer(saved.get("tokenizer")),
        max_steps=saved["max_steps"],
    )
    # A model trained under torch.compile saved its weights under "_orig_mod." names.
    state = {key.replace("_orig_mod.", ""): value for key, value in checkpoint["state_dict"].items()}
    try:
        task.load_state_dict(state)
    except RuntimeError as err:  # torch lists every mismatch; the first two say enough
        details = "; ".join(line.strip() for line in str(err).split("\n")[1:3])
        raise ValueError(
            f"the weights in {path!r} do not fit the model its config describes: {details}"
        ) from None
    return task.to(map_location).eval()


def _read(path: str, map_location: str | torch.device) -> object:
    """``torch.load`` of plain data (no pickled code), with failures turned into one clear error."""
    if not zipfile.is_zipfile(path):  # what torch.save writes; a damaged or truncated file is not one
        raise ValueError(
            f"{path!r} is not a readable PyTorch checkpoint: not a zip archive (damaged or truncated?)"
        )
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # zip, pickle and EOF errors all mean the same to the user
        first_line = str(err).split("\n")[0]
        raise ValueError(
            f"{path!r} is not a readable PyTorch checkpoint ({type(err).__name__}: {first_line})"
        ) from None


def _dataclass(cls: type, values: dict, path: str) -> object:
    """``cls(**values)``, with PosConfig nested in ModelConfig; unknown keys are a clear error."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"{path!r} holds {cls.__name__} keys this attnlab does not know: {', '.join(unknown)}"
        )
    values = dict(values)
    if cls is ModelConfig and isinstance(values.get("pos"), dict):
        values["pos"] = _dataclass(PosConfig, values["pos"], path)
    return cls(**values)


def _restore_tokenizer(files: dict[str, str] | None) -> object:
    """The tokenizer written back from the files embedded by ``TaskModule.on_save_checkpoint``."""
    if not files:
        return None
    from attnlab.data.tokenizers import load_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        return load_tokenizer(tmp)
