"""Token mixers besides softmax attention: latent attention (DeepSeek-V2/V3), differential attention
(Diff Transformer, DiffLlama) and gated DeltaNet (Qwen3-Next's linear layers)."""

from attnlab.blocks.mixers.delta import GatedDeltaNet, RecurrentCache
from attnlab.blocks.mixers.differential import DifferentialAttention, lambda_init
from attnlab.blocks.mixers.latent import LatentAttention, LatentCache

__all__ = [
    "DifferentialAttention",
    "GatedDeltaNet",
    "LatentAttention",
    "LatentCache",
    "RecurrentCache",
    "lambda_init",
]
