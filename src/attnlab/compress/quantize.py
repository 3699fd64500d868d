"""int8 weights for every ``nn.Linear`` of a model, with torchao, and what loading them needs.

torchao's ``quantize_`` replaces each Linear weight by an ``Int8Tensor``: int8 values and one float
scale per output channel (symmetric), so a Linear's weight takes a quarter of its float32 bytes.
Embeddings, norms, biases and positional tables stay float32 (a tied output projection reads the
token embedding, so it stays float32 too).

Weight-only, not dynamic-activation int8, by measurement (``benchmarks/compress_int8.py``, the
char-level GPT of ``attnlab-train`` on this project's CPU build of torch, one thread): against
float32, the forward pass ran at 0.81x with weight-only and 0.05x with dynamic activations, greedy
generation with the KV cache at 0.67x and 0.15x; the loss and the file size are the same for both.
Neither is faster than float32 on this CPU (weight-only converts the int8 weights to float32 in
each matmul): int8 here makes checkpoints smaller, not inference faster. Gradients also reach the
inputs through weight-only layers, which attnlab-explain's attributions need.

A state dict of Int8Tensors loads with ``torch.load(weights_only=True)`` once torchao is imported
(it registers its tensor classes as safe): ``allow_quantized_tensors`` imports it for exactly the
files that need it, so other checkpoints load without paying for the import.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

import torch
from torch import nn

QUANTIZATION_KEY = "attnlab_quantization"  # a checkpoint entry: {"method": "int8", ...}
TORCHAO_PREFIX = "torchao."


def quantization_of(checkpoint: object) -> dict | None:
    """What attnlab-compress recorded of a loaded checkpoint's quantization (None: not compressed): its
    own entry, or (compressed before checkpoint format 3) an item of the "attnlab" entry."""
    if not isinstance(checkpoint, dict):
        return None
    old = checkpoint.get("attnlab")
    return checkpoint.get(QUANTIZATION_KEY) or (old.get("quantization") if isinstance(old, dict) else None)


def quantize_int8(model: nn.Module) -> nn.Module:
    """``model`` with every ``nn.Linear`` weight as int8 with per-output-channel scales (in place)."""
    ao = torchao_quantization()
    # set_inductor_config=False: leave torch.compile's global settings as they are
    ao.quantize_(model, ao.Int8WeightOnlyConfig(set_inductor_config=False))
    return model


QUANTIZERS: dict[str, Callable[[nn.Module], nn.Module]] = {"int8": quantize_int8}


def quantized_layout(model: nn.Module, method: str) -> nn.Module:
    """A freshly built ``model`` in the layout of a checkpoint that ``method`` quantized, so that the
    checkpoint's state dict loads into it (``load_state_dict(state, assign=True)`` takes the saved
    int8 tensors as they are; the fresh weights quantized here are only placeholders)."""
    if method not in QUANTIZERS:
        raise ValueError(
            f"quantization method {method!r} is unknown to this attnlab (known: {', '.join(QUANTIZERS)})"
        )
    return QUANTIZERS[method](model)


def allow_quantized_tensors(path: str | os.PathLike) -> None:
    """Import torchao if the file that ``path`` names holds its tensors, so that ``torch.load(path,
    weights_only=True)`` can rebuild them; nothing for any other file (a file that is not a readable
    checkpoint is left for ``torch.load`` to refuse)."""
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(os.fspath(path))
    except Exception:  # not a zip archive, damaged, missing: torch.load says so in its own words
        return
    if any(name.startswith(TORCHAO_PREFIX) for name in names):
        torchao_quantization()


def torchao_quantization() -> ModuleType:
    """``torchao.quantization``, imported without the lines torchao's import logs on a CPU build: its
    CUDA-only extensions that do not load, Triton (a GPU compiler) missing, and a deprecation notice
    of torch's pytree."""
    with _dropped_log_records(
        ("torchao", lambda text: re.match(r"Failed to load \S+\.so: ", text) is not None),
        ("torchao.kernel.intmm", lambda text: text.startswith("Warning: Detected no triton")),
        ("torch.utils._pytree", lambda text: "is an Enum subclass and is now natively supported" in text),
    ):
        import torchao.quantization

    return torchao.quantization


@contextmanager
def _dropped_log_records(*rules: tuple[str, Callable[[str], bool]]) -> Iterator[None]:
    """While the block runs, each named logger drops the records whose text its rule matches."""
    filters = []
    for name, matches in rules:
        filters.append((logging.getLogger(name), _DropMatching(matches)))
    for logger, drop in filters:
        logger.addFilter(drop)
    try:
        yield
    finally:
        for logger, drop in filters:
            logger.removeFilter(drop)


class _DropMatching(logging.Filter):
    def __init__(self, matches: Callable[[str], bool]) -> None:
        super().__init__()
        self.matches = matches

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.matches(record.getMessage())
