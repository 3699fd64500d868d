"""Reading a local Hugging Face checkpoint directory: its ``config.json`` and its weight files.

Weights come as safetensors or a ``.bin`` (read with ``weights_only``, so a pickle cannot run code),
in one file or sharded with an ``*.index.json``. Every failure names the file at fault.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

WEIGHT_FILES = (  # looked for in this order
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def read_config(path: Path) -> dict:
    """The ``config.json`` of checkpoint directory ``path`` as a dict."""
    if path.is_file():  # an attnlab checkpoint (.ckpt) continues with ckpt_path=, not model.init_from
        raise FileNotFoundError(
            f"{path} is a file: model.init_from takes a Hugging Face checkpoint directory (config.json "
            "and weights); to continue from a checkpoint of attnlab-train give ckpt_path=<file>"
        )
    if not path.is_dir():
        raise FileNotFoundError(f"Hugging Face checkpoint directory {path} does not exist")
    file = path / "config.json"
    if not file.is_file():
        raise FileNotFoundError(
            f"{file} not found: a Hugging Face checkpoint directory needs its config.json"
        )
    try:
        config = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{file} is not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{file} must hold a JSON object, not a {type(config).__name__}")
    return config


def _shards(index: Path) -> list[str]:
    """The weight files an ``*.index.json`` lists under ``weight_map`` (tensor name -> file)."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        return sorted(set(weight_map.values()))
    except (ValueError, LookupError, TypeError, AttributeError) as e:  # not JSON, or not an index
        raise ValueError(
            f"{index} is not a weight index, a JSON object whose 'weight_map' maps tensor names to "
            f"files ({type(e).__name__}: {e})"
        ) from None


def _read_file(file: Path) -> dict[str, Tensor]:
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(file)
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # corrupt or foreign files: say which one
        raise ValueError(f"{file}: cannot read weights ({e})") from e


def read_weights(path: Path) -> dict[str, Tensor]:
    """The tensors of a checkpoint directory: safetensors or ``.bin``, single file or sharded with an index."""
    for name in WEIGHT_FILES:
        file = path / name
        if not file.is_file():
            continue
        if not name.endswith(".index.json"):
            return _read_file(file)
        tensors: dict[str, Tensor] = {}
        for shard in _shards(file):
            if not (path / shard).is_file():
                raise FileNotFoundError(f"{path / shard} not found (listed in {file})")
            tensors |= _read_file(path / shard)
        return tensors
    raise FileNotFoundError(f"no weights in {path}: expected one of {', '.join(WEIGHT_FILES)}")
