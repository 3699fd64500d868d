"""Loading a checkpoint of ``attnlab-train``: the task module and model, its tokenizer, its run's data.
The one way to load one, for the commands, the experiments and the benchmarks alike.

A checkpoint of ``attnlab-train`` holds the model and task configs, the tokenizer, and the run's
whole config (data included); it lives in ``<run>/checkpoints/``, next to the run's
``tokenizer.json`` and, for string labels, ``labels.json`` (``attnlab.schema.rundir``).
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from attnlab.compress import allow_quantized_tensors, quantization_of, quantized_layout
from attnlab.data import build_datamodule
from attnlab.data.tokenizers import load_tokenizer
from attnlab.models import build_model
from attnlab.schema.checks import check_trains, validate_saved
from attnlab.schema.errors import PICKLED_CODE, ConfigError
from attnlab.schema.load import read_model_config, read_optim_config, read_task_config, upgrade_group
from attnlab.schema.model import ModelConfig
from attnlab.schema.rundir import (
    LABELS_FILE,
    TOKENIZER_FILE,
    is_sharded_checkpoint,
    points_elsewhere,
    run_dir_of,
)
from attnlab.tasks import TASK_CLASSES, TaskModule
from attnlab.tasks.base import TOKENIZER_KEY
from attnlab.training.resume import read_run_state

OLD_CHECKPOINT_KEY = "attnlab"  # formats 1 and 2: the configs and tokenizer in one entry of their own


@dataclass
class Loaded:
    """A checkpoint ready for inference."""

    path: Path
    task: Any  # the task module (attnlab.tasks.TaskModule), in eval mode
    model: nn.Module
    tokenizer: Any  # attnlab.data.tokenizers.Tokenizer, or None for images
    label_names: list[str] | None

    @property
    def family(self) -> str:
        return self.model.family

    @property
    def run_dir(self) -> Path:
        return run_dir_of(self.path)

    def class_name(self, index: int) -> str:
        names = self.label_names
        return names[index] if names is not None and index < len(names) else f"class {index}"


def load_checkpoint(
    ckpt_path: str | Path, device: str = "cpu", model_changes: Mapping[str, Any] | None = None
) -> Loaded:
    """The task module, model and tokenizer of an attnlab checkpoint (FileNotFoundError/ValueError if bad);
    ``model_changes`` as in ``load_task_from_checkpoint`` (``{"model.attn_backend": "flex"}``)."""
    path = Path(ckpt_path)
    task = load_task_from_checkpoint(path, map_location=device, model_changes=model_changes)
    tokenizer = task.tokenizer
    run_dir = run_dir_of(path)
    reads_text = task.model.input_kind == "tokens"
    if tokenizer is None and reads_text and (run_dir / TOKENIZER_FILE).is_file():
        tokenizer = load_tokenizer(run_dir)
    if tokenizer is None and reads_text:
        raise ValueError(f"{str(path)!r} has no tokenizer, and none is saved in its run directory {run_dir}")
    labels = run_dir / LABELS_FILE
    names = json.loads(labels.read_text(encoding="utf-8")) if labels.is_file() else None
    return Loaded(path, task, task.model, tokenizer, names)


def checkpoint_tokenizer(ckpt_path: str | Path) -> Any:
    """The tokenizer of an attnlab checkpoint (saved in it, else in its run directory), without building
    its model: what a check of text against it needs (None where it has none). Errors as ``load_checkpoint``'s."""
    path = Path(ckpt_path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    _, files = saved_hparams(_read(str(path)), str(path))
    tokenizer = _restore_tokenizer(files)
    run_dir = run_dir_of(path)
    if tokenizer is None and (run_dir / TOKENIZER_FILE).is_file():
        tokenizer = load_tokenizer(run_dir)
    return tokenizer


def run_datamodule(loaded: Loaded) -> Any:
    """The data module of the checkpoint's run (same data config and seed), set up.

    Used for validation batches (head importance) and the image normalisation of a ViT.
    """
    state = read_run_state(str(loaded.path))
    if "config" not in state:
        raise ValueError(f"{str(loaded.path)!r} holds no run config, so its data cannot be rebuilt")
    run = validate_saved(state["config"])
    datamodule = build_datamodule(
        run.data, needs=run.task.inner().data_needs, seed=run.seed, model_cfg=loaded.model.cfg
    )
    datamodule.setup("fit")
    return datamodule


def image_normalisation(datamodule: Any) -> tuple[Tensor, Tensor]:
    """Mean and std (C, 1, 1) with which the run normalised its images."""
    dataset = datamodule.datasets.get("val")
    if dataset is None or not hasattr(dataset, "mean"):
        raise ValueError("the checkpoint's data module has no image normalisation (is it an image run?)")
    return dataset.mean, dataset.std


def load_task_from_checkpoint(
    path: str | os.PathLike,
    map_location: str | torch.device = "cpu",
    model_changes: Mapping[str, Any] | None = None,
) -> TaskModule:
    """The task module saved in an attnlab Lightning checkpoint, in eval mode.

    Lightning's ``load_from_checkpoint`` (``weights_only=True``: plain data, no pickled code) of the
    task's class rebuilds the model from the saved ModelConfig with ``model_changes`` (dotted keys:
    settings that hold no weights, as attnlab-eval's ``model.pos.rope_base``) and loads its weights.
    The file is checked and its configs read (those of older formats converted) first, so that a
    foreign, damaged or newer checkpoint is one clear error; the tokenizer saved with it, if any, is
    restored as ``task.tokenizer``. A checkpoint of attnlab-compress loads into the
    quantized layout of its method (the model given to ``load_from_checkpoint`` in place of its config).
    """
    path = os.fspath(path)
    if points_elsewhere(path):
        raise FileNotFoundError(
            f"checkpoint {path!r} is a link (to {os.readlink(path)}): give the file itself"
        )
    if is_sharded_checkpoint(path):
        raise FileNotFoundError(
            f"checkpoint {path!r} is sharded (trainer.strategy=fsdp2 checkpoint.sharded=true): write it as "
            f"one file first with: attnlab-consolidate {path}"
        )
    if os.path.isdir(path):
        raise FileNotFoundError(
            f"checkpoint {path!r} is a directory: give its .ckpt file (checkpoints/last.ckpt)"
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    checkpoint = _read(path)
    hparams, tokenizer = saved_hparams(checkpoint, path)
    quantization = quantization_of(checkpoint)
    try:
        model_cfg = with_changes(read_model_config(hparams["model"]), model_changes or {})
        task_cfg = read_task_config(hparams["task"])
        optim_cfg = read_optim_config(hparams["optim"])
    except ConfigError as err:
        raise ValueError(f"{path!r} holds a config this attnlab cannot read: {err}") from None
    check_trains(model_cfg.family, task_cfg.name)
    model: Any = model_cfg  # the task module takes it typed, and saves it as plain data
    if quantization is not None:  # written by attnlab-compress: its weights fit the quantized layout
        model = quantized_layout(build_model(model_cfg), quantization["method"])
    try:
        task = TASK_CLASSES[task_cfg.name].load_from_checkpoint(
            path,
            map_location=map_location,
            weights_only=True,
            **{**hparams, "model": model, "task": task_cfg, "optim": optim_cfg},  # typed, read once
            tokenizer=_restore_tokenizer(tokenizer),
        )
    except RuntimeError as err:  # torch lists every mismatch; the first two say enough
        details = "; ".join(line.strip() for line in str(err).split("\n")[1:3])
        raise ValueError(
            f"the weights in {path!r} do not fit the model its config describes: {details}"
        ) from None
    return task.to(map_location).eval()


HPARAMS = ("model", "task", "optim", "max_steps")  # TaskModule's hyperparameters
LIGHTNING_KEYS = ("state_dict", "pytorch-lightning_version")  # in every checkpoint Lightning writes


def saved_hparams(checkpoint: object, path: str) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The task module's hyperparameters saved in ``checkpoint`` in today's shape, and the files of its
    tokenizer (None: none saved). Checkpoints of formats 1 and 2 hold both in an ``"attnlab"`` entry,
    format 1's configs in the flat classes of before the tagged groups."""
    if not isinstance(checkpoint, dict) or not all(key in checkpoint for key in LIGHTNING_KEYS):
        found = sorted(checkpoint)[:8] if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise ValueError(
            f"{path!r} is not an attnlab checkpoint: it has no {' and '.join(LIGHTNING_KEYS)} (found {found})"
        )
    old = checkpoint.get(OLD_CHECKPOINT_KEY)
    if isinstance(old, dict):
        saved, tokenizer = old, old.get("tokenizer")
    else:
        saved, tokenizer = checkpoint.get("hyper_parameters"), checkpoint.get(TOKENIZER_KEY)
    if not isinstance(saved, dict) or not all(key in saved for key in HPARAMS):
        raise ValueError(
            f"{path!r} is not an attnlab checkpoint: its hyper_parameters are not {', '.join(HPARAMS)} "
            "(attnlab-train writes them)"
        )
    hparams = {key: saved[key] for key in HPARAMS}
    if isinstance(old, dict) and old.get("format", 1) == 1:  # before the tagged groups
        hparams.update({name: upgrade_group(name, hparams[name]) for name in ("model", "task", "optim")})
    return hparams, tokenizer


def with_changes(model_cfg: ModelConfig, changes: Mapping[str, Any]) -> ModelConfig:
    """``model_cfg`` with ``changes`` (``{"model.pos.rope_base": 5e5}``), typed by its class."""
    if not changes:
        return model_cfg
    node = OmegaConf.create({"model": OmegaConf.structured(model_cfg)})
    for key, value in changes.items():
        OmegaConf.update(node, key, value, merge=True)
    return OmegaConf.to_object(node)["model"]


def _read(path: str) -> object:
    """``torch.load`` of plain data (no pickled code), with failures turned into one clear error. The
    tensors are memory-mapped, not read: this only looks at the checkpoint before Lightning loads it."""
    if not zipfile.is_zipfile(path):  # what torch.save writes; a damaged or truncated file is not one
        raise ValueError(
            f"{path!r} is not a readable PyTorch checkpoint: not a zip archive (damaged or truncated?)"
        )
    allow_quantized_tensors(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # tensors not read yet
    except pickle.UnpicklingError:  # torch's message advises weights_only=False: never do that here
        raise ValueError(f"{path!r} is {PICKLED_CODE}") from None
    except Exception as err:  # zip and EOF errors all mean the same to the user
        first_line = str(err).split("\n")[0]
        raise ValueError(
            f"{path!r} is not a readable PyTorch checkpoint ({type(err).__name__}: {first_line})"
        ) from None


def _restore_tokenizer(files: dict[str, str] | None) -> object:
    """The tokenizer written back from the files embedded by ``TaskModule.on_save_checkpoint``."""
    if not files:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        return load_tokenizer(tmp)


def token_strings(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each id decoded alone, special tokens included: labels for the axes of a picture."""
    return [tokenizer.decode([i], skip_special=False) for i in ids]
