"""A sharded checkpoint's two pickled files, read without running code.

``torch.distributed.checkpoint`` keeps its index (``.metadata``: which tensor lies where in which shard
file) as a pickle and reads it with ``pickle.load``, which runs whatever a crafted file asks for.
``MetadataUnpickler`` resolves only the classes an index is made of (DCP's metadata dataclasses, torch's
sizes, dtypes and layouts, paths, plain containers); anything else refuses the checkpoint. ``SafeReader``
is DCP's public ``FileSystemReader`` with that reading of the index, and each shard file the index names
must lie in the checkpoint's own directory. Lightning's ``meta.pt`` (loops, callbacks, configs) is read
with ``torch.load(weights_only=True)``. A refusal is the one line of a hostile plain checkpoint
(``PICKLED_CODE``). Imported only where a sharded checkpoint is read: ``torch.distributed.checkpoint``
takes about a second to import.
"""

from __future__ import annotations

import io
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, StorageMeta

from attnlab.schema.errors import PICKLED_CODE, ConfigError
from attnlab.schema.rundir import SHARDED_INDEX, SHARDED_META

DCP_METADATA = "torch.distributed.checkpoint.metadata"
INDEX_CLASSES = {
    (DCP_METADATA, name)
    for name in (
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "_MEM_FORMAT_ENCODING",
    )
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # a layout (torch.strided) by its name
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
}


class MetadataUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that builds only the objects of a DCP index (``INDEX_CLASSES`` and torch's
    dtypes). Pickled tensors are not among them: unpickling a storage calls ``torch.load`` without
    ``weights_only``, and an index holds none."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in INDEX_CLASSES:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint index")


def read_index(checkpoint: Path, key: str = "ckpt_path") -> Metadata:
    """The DCP index of the sharded checkpoint ``checkpoint``; ConfigError naming ``key`` for a file
    that asks for any other object, or names a shard file outside the checkpoint's directory."""
    try:
        with open(checkpoint / SHARDED_INDEX, "rb") as file:
            index = MetadataUnpickler(file).load()
    except (pickle.UnpicklingError, AttributeError, TypeError, ValueError, EOFError, IndexError) as err:
        hostile = isinstance(err, pickle.UnpicklingError) and "checkpoint index" in str(err)
        allowed = PICKLED_CODE if hostile else f"its {SHARDED_INDEX} is not readable ({type(err).__name__})"
        raise ConfigError(key, str(checkpoint), allowed) from None
    if not isinstance(index, Metadata):
        raise ConfigError(key, str(checkpoint), f"its {SHARDED_INDEX} is not a checkpoint index")
    for where in (index.storage_data or {}).values():
        name = str(getattr(where, "relative_path", ""))
        if not name or Path(name).name != name or name in (".", ".."):
            raise ConfigError(
                key, str(checkpoint), f"its {SHARDED_INDEX} names a shard file outside it ({name!r})"
            )
    return index


def read_meta(checkpoint: Path, key: str = "ckpt_path") -> dict[str, Any]:
    """Lightning's ``meta.pt`` of the sharded checkpoint ``checkpoint`` (plain data and tensors only);
    ConfigError naming ``key`` for one that holds other pickled objects or is not readable."""
    try:
        meta = torch.load(checkpoint / SHARDED_META, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # torch's message advises weights_only=False: never do that here
        raise ConfigError(key, str(checkpoint), PICKLED_CODE) from None
    except Exception as err:  # a damaged or foreign file fails in many ways; all mean the same here
        raise ConfigError(
            key, str(checkpoint), f"its {SHARDED_META} is not readable ({type(err).__name__})"
        ) from None
    if not isinstance(meta, dict):
        raise ConfigError(key, str(checkpoint), f"its {SHARDED_META} is not Lightning's metadata")
    return meta


def check_sharded(checkpoint: Path, key: str = "ckpt_path") -> dict[str, Any]:
    """Every pickled part of ``checkpoint`` read safely (ConfigError naming ``key`` if not): its index,
    the plain values its shards hold (optimizer settings: DCP's planner unpickles them with
    ``weights_only=False``), and its ``meta.pt``, returned. Called before anything else loads the
    checkpoint: Lightning's resume reads it through a reader and planner DCP builds itself."""
    index = read_index(checkpoint, key)
    for place, where in index.storage_data.items():
        if isinstance(index.state_dict_metadata.get(place.fqn), BytesStorageMetadata):
            check_value(checkpoint, where, key)
    return read_meta(checkpoint, key)


def check_value(checkpoint: Path, where: Any, key: str) -> None:
    """The pickled value stored at ``where`` (a ``_StorageInfo``: file, offset, length) unpickles as
    plain data and tensors (ConfigError naming ``key`` if not)."""
    if where.transform_descriptors:  # compressed by a DCP extension: not what attnlab writes
        raise ConfigError(key, str(checkpoint), "its shards use transforms attnlab does not read")
    with open(checkpoint / where.relative_path, "rb") as file:
        file.seek(where.offset)
        value = file.read(where.length)
    plain_value(io.BytesIO(value), checkpoint, key)


def plain_value(value: io.BytesIO, checkpoint: Path, key: str) -> None:
    """ConfigError naming ``key`` unless ``value`` (a torch.save'd object) is plain data and tensors."""
    try:
        torch.load(value, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise ConfigError(key, str(checkpoint), PICKLED_CODE) from None
    except Exception as err:
        raise ConfigError(
            key, str(checkpoint), f"its shards are not readable ({type(err).__name__})"
        ) from None
    finally:
        value.seek(0)


class SafeReader(FileSystemReader):
    """DCP's public ``FileSystemReader`` whose index is read by ``read_index`` (no code run, no shard
    file outside the checkpoint's directory); a refusal names ``key``."""

    def __init__(self, checkpoint: Path, key: str = "ckpt_path") -> None:
        super().__init__(checkpoint)
        self.key = key

    def read_metadata(self) -> Metadata:  # no rank argument: DCP then never looks for an index per rank
        index = read_index(Path(self.path), self.key)
        index.storage_meta = index.storage_meta or StorageMeta()
        index.storage_meta.load_id = self.load_id
        return index


class SafePlanner(_EmptyStateDictLoadPlanner):
    """DCP's planner that rebuilds the whole saved state (as ``dcp_to_torch_save`` does; torch's private
    class is the only planner that fills an empty state dict), each pickled value checked to be plain
    data before DCP's ``load_bytes`` unpickles it (with ``weights_only=False``)."""

    def __init__(self, checkpoint: Path, key: str = "ckpt_path") -> None:
        super().__init__()
        self.checkpoint, self.key = checkpoint, key

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        plain_value(value, self.checkpoint, self.key)
        super().load_bytes(read_item, value)


def read_sharded(checkpoint: Path, key: str = "ckpt_path") -> tuple[dict[str, Any], dict[str, Any]]:
    """Every saved tensor and value of the sharded checkpoint ``checkpoint`` (weights, optimizer
    states) and its ``meta.pt``, read in this one process without a process group and without running
    code (ConfigError naming ``key`` for a checkpoint that asks to)."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    meta = check_sharded(checkpoint, key)  # first: DCP logs a failed read of the index as a traceback
    saved: dict[str, Any] = {}  # filled with every saved tensor, as dcp_to_torch_save does
    reader, planner = SafeReader(checkpoint, key), SafePlanner(checkpoint, key)
    with warnings.catch_warnings():  # that no process group is there: none is meant to be
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        # private: DCP's public load() keeps only the keys of the state dict it is given (none here)
        _load_state_dict(saved, storage_reader=reader, planner=planner, no_dist=True)
    return saved, meta
