"""Shared Transformer blocks: every model family is composed from these and nothing else."""

from attnlab.blocks.attention import (
    ATTENTION_PATHS,
    CrossAttention,
    MultiHeadAttention,
    SelfAttention,
    attention_modules,
    record_attention,
    use_attention_path,
)
from attnlab.blocks.cache import AttentionCache, KVCache
from attnlab.blocks.embedding import TokenEmbedding
from attnlab.blocks.ffn import FeedForward
from attnlab.blocks.heads import ClassificationHead, LMHead, MaskedLMHead
from attnlab.blocks.layers import (
    TransformerLayer,
    TransformerStack,
    decoder_layer,
    encoder_layer,
)
from attnlab.blocks.masks import KeyRule, additive_mask, document_positions
from attnlab.blocks.norm import RMSNorm, build_norm
from attnlab.blocks.positional import PositionalEncoding, build_positional
from attnlab.blocks.view import AttentionView

__all__ = [
    "ATTENTION_PATHS",
    "AttentionCache",
    "AttentionView",
    "ClassificationHead",
    "CrossAttention",
    "FeedForward",
    "KVCache",
    "KeyRule",
    "LMHead",
    "MaskedLMHead",
    "MultiHeadAttention",
    "PositionalEncoding",
    "RMSNorm",
    "SelfAttention",
    "TokenEmbedding",
    "TransformerLayer",
    "TransformerStack",
    "additive_mask",
    "attention_modules",
    "build_norm",
    "build_positional",
    "decoder_layer",
    "document_positions",
    "encoder_layer",
    "record_attention",
    "use_attention_path",
]
