"""What the command-line tools need from a checkpoint: the model, its tokenizer, its run's data.

A checkpoint of ``attnlab-train`` holds the model and task configs, the tokenizer, and the run's
whole config (data included); it lives in ``<run>/checkpoints/``, next to the run's
``tokenizer.json`` and, for string labels, ``labels.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn


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
        return self.model.cfg.family

    @property
    def run_dir(self) -> Path:
        return self.path.resolve().parent.parent

    def class_name(self, index: int) -> str:
        names = self.label_names
        return names[index] if names is not None and index < len(names) else f"class {index}"


def load_checkpoint(ckpt_path: str | Path, device: str = "cpu") -> Loaded:
    """The task module, model and tokenizer of an attnlab checkpoint (FileNotFoundError/ValueError if bad)."""
    from attnlab.tasks import load_task_from_checkpoint

    path = Path(ckpt_path)
    task = load_task_from_checkpoint(path, map_location=device)
    tokenizer = task.tokenizer
    run_dir = path.resolve().parent.parent
    if tokenizer is None and task.model.cfg.family != "vit" and (run_dir / "tokenizer.json").is_file():
        from attnlab.data.tokenizers import load_tokenizer

        tokenizer = load_tokenizer(run_dir)
    if tokenizer is None and task.model.cfg.family != "vit":
        raise ValueError(f"{str(path)!r} has no tokenizer, and none is saved in its run directory {run_dir}")
    labels = run_dir / "labels.json"
    names = json.loads(labels.read_text(encoding="utf-8")) if labels.is_file() else None
    return Loaded(path, task, task.model, tokenizer, names)


def run_datamodule(loaded: Loaded) -> Any:
    """The data module of the checkpoint's run (same data config and seed), set up.

    Used for validation batches (head importance) and the image normalisation of a ViT.
    """
    from attnlab.config import validate
    from attnlab.data import build_datamodule
    from attnlab.training.resume import read_run_state

    state = read_run_state(str(loaded.path))
    if "config" not in state:
        raise ValueError(f"{str(loaded.path)!r} holds no run config, so its data cannot be rebuilt")
    run = validate(state["config"])
    datamodule = build_datamodule(
        run.data, family=loaded.family, task=run.task.name, seed=run.seed, model_cfg=loaded.model.cfg
    )
    datamodule.setup("fit")
    return datamodule


def image_normalisation(datamodule: Any) -> tuple[Tensor, Tensor]:
    """Mean and std (C, 1, 1) with which the run normalised its images."""
    dataset = datamodule.datasets.get("val")
    if dataset is None or not hasattr(dataset, "mean"):
        raise ValueError("the checkpoint's data module has no image normalisation (is it an image run?)")
    return dataset.mean, dataset.std


def encode_text(loaded: Loaded, text: str, mask_token: str = "<mask>") -> list[int]:
    """Token ids of ``text`` laid out as the run's data did.

    gpt and seq2seq: the plain encoding (a gpt prompt that encodes to nothing starts from bos);
    bert classifier: ``cls`` + tokens; bert masked LM: ``mask_token`` in the text becomes the mask id.
    """
    tok = loaded.tokenizer
    if loaded.family == "bert" and loaded.model.cls_head is not None:
        return [tok.cls_id, *tok.encode(text)]
    if loaded.family == "bert":
        pieces = text.split(mask_token)
        ids = tok.encode(pieces[0])
        for piece in pieces[1:]:
            ids += [tok.mask_id, *tok.encode(piece)]
        return ids
    ids = tok.encode(text)
    return ids or ([tok.bos_id] if loaded.family == "gpt" else ids)


def token_strings(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each id decoded alone, special tokens included: labels for the axes of a picture."""
    return [tokenizer.decode([i], skip_special=False) for i in ids]
