"""Checkpoint writes off the training thread (``checkpoint.async_save``).

Lightning's ``AsyncCheckpointIO`` hands each save to one writer thread. attnlab's writer keeps what a
synchronous save guarantees:

- **A snapshot, not the live state.** Training changes the weights and the optimizer's moments in
  place while the writer serialises them, so every tensor is copied to the CPU on the calling
  thread first (a memory copy; the disk write is what the thread takes over). Tensors that share a
  storage in the checkpoint (tied embeddings) still share one in the copy, so the file is as large as
  a synchronous save's. Lightning 2.6.6 clones on the tensor's own device and copies shared
  storages twice.
- **The same order on disk.** Writes and removals (a best checkpoint replaced) run one at a time in
  the order they were asked for, each write through ``AtomicCheckpointIO`` (``<name>.tmp``, fsync,
  rename): a kill at any moment leaves the state of some earlier save, never half a file.
- **No write after a failed one.** A later ``last.ckpt`` would name a best checkpoint that never
  reached the disk; the failure (a full disk's one line) is raised at the next save, or when fit
  ends, which waits for every pending write (``teardown``).

A subclass of Lightning's writer rather than a copy: it keeps Lightning's ``_executor`` and ``_error``
(private members, checked by a contract test in ``tests/training/test_checkpoint_io.py``) and replaces
what is queued and how.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from pytorch_lightning.plugins.io import AsyncCheckpointIO

from attnlab.training.callbacks.checkpoints import AtomicCheckpointIO


def snapshot(checkpoint: dict) -> dict:
    """``checkpoint`` with every tensor copied to the CPU; tensors that share a storage share its copy."""
    copies: dict[tuple[torch.device, int], torch.UntypedStorage] = {}

    def copy(t: torch.Tensor) -> torch.Tensor:
        if type(t) is not torch.Tensor or t.layout != torch.strided:  # parameters are detached already
            return t.detach().to("cpu", copy=True)
        storage = t.untyped_storage()
        key = (t.device, storage.data_ptr())
        if key not in copies:
            copies[key] = torch.UntypedStorage(storage.nbytes()).copy_(storage)
        view = torch.empty(0, dtype=t.dtype)
        return view.set_(copies[key], t.storage_offset(), t.size(), t.stride())

    # What Lightning's checkpoints are made of, walked directly: apply_to_collection alone takes about
    # a millisecond for a checkpoint's few hundred entries (each tested as a dataclass, a mapping, ...).
    def walk(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return copy(value)
        if type(value) in (dict, OrderedDict):  # a model's state_dict is an OrderedDict
            return type(value)((k, walk(v)) for k, v in value.items())
        if type(value) in (list, tuple):
            return type(value)(walk(v) for v in value)
        if isinstance(value, (str, int, float, bool, type(None))):
            return value
        return apply_to_collection(value, torch.Tensor, copy)  # defaultdicts, named tuples, dataclasses

    return walk(checkpoint)


class BackgroundCheckpointIO(AsyncCheckpointIO):
    """``AtomicCheckpointIO`` writing on one background thread: see the module's docstring."""

    def __init__(self) -> None:
        super().__init__(AtomicCheckpointIO())
        self.failed = False  # for good: the writes queued behind a failed one are dropped

    def save_checkpoint(self, checkpoint: dict, path: str | os.PathLike, storage_options: Any = None) -> None:
        self.raise_failure()
        self.submit(self.checkpoint_io.save_checkpoint, snapshot(checkpoint), path, storage_options)

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        self.submit(self.checkpoint_io.remove_checkpoint, path)

    def publish(self, staged: os.PathLike, target: os.PathLike) -> None:
        """Queued behind the write of ``staged``: published once it is whole on disk."""
        self.submit(self.checkpoint_io.publish, staged, target)

    def submit(self, write: Any, *args: Any) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
        self._executor.submit(self.unless_failed, write, *args)

    def unless_failed(self, write: Any, *args: Any) -> None:
        if not self.failed:
            try:
                write(*args)
            except BaseException as err:
                self.failed, self._error = True, err

    def teardown(self) -> None:
        """Wait for every pending write; raise the first that failed (once)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.raise_failure()

    def raise_failure(self) -> None:
        err, self._error = self._error, None
        if err is not None:
            raise err
