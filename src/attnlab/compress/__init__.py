"""Smaller checkpoints of trained models: int8 weights (``quantize``), attention heads pruned (``prune``).

A library over models, as ``generate`` and ``explain`` are: it takes a model and changes it, and
knows nothing of Lightning, Hydra, data or tasks. ``attnlab-compress`` (``attnlab.cli.compress``)
drives it on a checkpoint; ``attnlab.checkpoint`` asks it for the layout that a compressed
checkpoint's weights load into.
"""

from attnlab.compress.prune import PRUNING_KEY, heads_to_keep, prune_heads, total_heads
from attnlab.compress.quantize import (
    QUANTIZATION_KEY,
    QUANTIZERS,
    allow_quantized_tensors,
    quantization_of,
    quantize_int8,
    quantized_layout,
)

__all__ = [
    "PRUNING_KEY",
    "QUANTIZATION_KEY",
    "QUANTIZERS",
    "allow_quantized_tensors",
    "heads_to_keep",
    "prune_heads",
    "quantization_of",
    "quantize_int8",
    "quantized_layout",
    "total_heads",
]
