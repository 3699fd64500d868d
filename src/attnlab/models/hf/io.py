"""Reading a local Hugging Face checkpoint directory: its ``config.json`` and its weight files.

Weights come as safetensors or a ``.bin`` (read with ``weights_only``, so a pickle cannot run code),
in one file or sharded with an ``*.index.json``. Every failure names the file at fault.
"""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path

import torch
from torch import Tensor

WEIGHT_FILES = (  # looked for in this order
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


REMOTE_CODE_KEYS = ("auto_map", "trust_remote_code")  # config.json keys that load Python from the checkpoint


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
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{file} is not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError(f"{file} is not a config: nested too deeply") from None
    if not isinstance(config, dict):
        raise ValueError(f"{file} must hold a JSON object, not a {type(config).__name__}")
    refuse_remote_code(config, file)
    return config


def refuse_remote_code(config: dict, file: Path) -> None:
    """ValueError for a config.json that asks for code shipped with the checkpoint (``auto_map``,
    ``trust_remote_code``): attnlab builds only the architectures it knows, and runs no such code."""
    asked = [key for key in REMOTE_CODE_KEYS if config.get(key)]
    if asked:
        raise ValueError(
            f"{file} asks for code shipped with the checkpoint ({', '.join(asked)}): attnlab runs none, and "
            "builds only the architectures it knows"
        )


def _shards(index: Path) -> list[str]:
    """The weight files an ``*.index.json`` lists under ``weight_map`` (tensor name -> file), each a
    file name in the index's own directory."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (ValueError, LookupError, TypeError, AttributeError, RecursionError) as e:  # not an index
        raise ValueError(
            f"{index} is not a weight index, a JSON object whose 'weight_map' maps tensor names to "
            f"files ({type(e).__name__}: {e})"
        ) from None
    for shard in shards:
        if not isinstance(shard, str) or Path(shard).name != shard or shard in (".", ".."):
            raise ValueError(f"{index} lists {shard!r}, not a file beside it")
    return shards


def _read_file(file: Path, shapes_only: bool) -> dict[str, Tensor]:
    """The tensors of one weight file; with ``shapes_only``, as tensors on the meta device (their
    shapes, nothing read but the file's header). ValueError naming the file for one that is damaged,
    foreign, or pickles more than tensors (a ``.bin`` is read with ``weights_only``)."""
    try:
        if file.suffix == ".safetensors":
            return _read_safetensors(file, shapes_only)
        mmap = shapes_only and zipfile.is_zipfile(file)  # torch.save's format; older .bin files are read
        tensors = torch.load(file, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError:  # torch's message advises weights_only=False: never do that here
        raise ValueError(
            f"{file}: holds pickled objects beyond tensors and plain data, which could run code, so it is "
            "not loaded"
        ) from None
    except Exception as e:  # corrupt or foreign files: say which one, on one line
        raise ValueError(
            f"{file}: cannot read weights ({str(e).strip().splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    if not isinstance(tensors, dict) or not all(isinstance(t, Tensor) for t in tensors.values()):
        raise ValueError(f"{file}: cannot read weights (not a mapping of names to tensors)")
    return {k: t.to("meta") for k, t in tensors.items()} if shapes_only else tensors


def _read_safetensors(file: Path, shapes_only: bool) -> dict[str, Tensor]:
    from safetensors import safe_open
    from safetensors.torch import load_file

    if not shapes_only:
        return load_file(file)
    with safe_open(file, framework="pt") as weights:  # the header only
        shapes = {name: weights.get_slice(name).get_shape() for name in weights.keys()}  # noqa: SIM118
    return {name: torch.empty(shape, device="meta") for name, shape in shapes.items()}


def read_weights(path: Path, shapes_only: bool = False) -> dict[str, Tensor]:
    """The tensors of a checkpoint directory: safetensors or ``.bin``, single file or sharded with an
    index; with ``shapes_only``, on the meta device (a check before any run: nothing read but the
    files' headers)."""
    for name in WEIGHT_FILES:
        file = path / name
        if not file.is_file():
            continue
        if not name.endswith(".index.json"):
            return _read_file(file, shapes_only)
        tensors: dict[str, Tensor] = {}
        for shard in _shards(file):
            if not (path / shard).is_file():
                raise FileNotFoundError(f"{path / shard} not found (listed in {file})")
            tensors |= _read_file(path / shard, shapes_only)
        return tensors
    raise FileNotFoundError(f"no weights in {path}: expected one of {', '.join(WEIGHT_FILES)}")
