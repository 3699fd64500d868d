"""Transformer layers: residual sublayers around attention and feed-forward.

An encoder layer is self-attention + feed-forward; a decoder layer adds cross-attention to the
encoder's output between them. Decoder-only models use the encoder layer with a causal mask.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from torch import Tensor, nn

from attnlab.blocks.attention import MultiHeadAttention
from attnlab.blocks.cache import AttentionCache, KVCache
from attnlab.blocks.ffn import FeedForward, ffn_width
from attnlab.blocks.flex import MaskMemo
from attnlab.blocks.norm import build_norm
from attnlab.blocks.positional import PositionalEncoding
from attnlab.schema.model import ModelConfig


@dataclass(frozen=True)
class LayerConfig:
    """Everything a layer needs: the model config's fields of these names (``of``), with the
    feed-forward width resolved. No defaults: each setting has one, in the schema."""

    d_model: int
    n_heads: int
    d_ff: int  # resolved from model.d_ff and model.ffn_mult (attnlab.blocks.ffn.ffn_width)
    n_kv_heads: int | None
    activation: str
    norm: str
    norm_eps: float
    norm_first: bool
    bias: bool
    norm_bias: bool
    dropout: float
    attn_dropout: float
    ffn_dropout: float
    attn_scale: float | None
    attn_window: int | None  # self-attention only: cross-attention is never windowed
    qk_norm: bool
    attn_backend: str  # "flex": FlexAttention (attnlab.blocks.flex)

    @classmethod
    def of(cls, cfg: ModelConfig) -> LayerConfig:
        """The per-layer settings of a model config."""
        same = {f.name: getattr(cfg, f.name) for f in fields(cls) if f.name != "d_ff"}
        same["attn_backend"] = str(cfg.attn_backend)
        return cls(**same, d_ff=ffn_width(cfg.d_model, cfg.d_ff, cfg.ffn_mult))


class Residual(nn.Module):
    """A sublayer ``fn`` with its norm and residual connection.

    Pre-norm: ``x + dropout(fn(norm(x)))``; post-norm (the original paper): ``norm(x + dropout(fn(x)))``.
    """

    def __init__(self, fn: nn.Module, cfg: LayerConfig) -> None:
        super().__init__()
        self.fn = fn
        self.norm = build_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.norm_bias)
        self.norm_first = cfg.norm_first
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, call: Callable[[nn.Module, Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x + self._dropout(call(self.fn, self.norm(x)))
        return self.norm(x + self._dropout(call(self.fn, x)))

    def _dropout(self, y: Tensor) -> Tensor:
        """Dropout only where it acts (training, p > 0): skipping the identity saves a call per token step."""
        return self.dropout(y) if self.training and self.dropout.p > 0 else y


Heads = Sequence[int] | None  # the heads an attention module keeps (attnlab.compress.prune); None: all


def _attention(cfg: LayerConfig, cross: bool = False, heads: Heads = None) -> MultiHeadAttention:
    return MultiHeadAttention(
        cfg.d_model,
        cfg.n_heads,
        cfg.n_kv_heads,
        bias=cfg.bias,
        dropout=cfg.attn_dropout,
        scale=cfg.attn_scale,
        cross=cross,
        window=None if cross else cfg.attn_window,
        qk_norm=cfg.qk_norm,
        norm_eps=cfg.norm_eps,
        head_ids=heads,
        backend=cfg.attn_backend,
    )


class TransformerLayer(nn.Module):
    """Self-attention, optional cross-attention, feed-forward; each a ``Residual`` sublayer.
    ``self_heads`` and ``cross_heads`` prune their attention to those heads (None: all)."""

    def __init__(
        self,
        cfg: LayerConfig,
        cross_attention: bool = False,
        self_heads: Heads = None,
        cross_heads: Heads = None,
    ) -> None:
        super().__init__()
        self.self_attn = Residual(_attention(cfg, heads=self_heads), cfg)
        cross = Residual(_attention(cfg, cross=True, heads=cross_heads), cfg) if cross_attention else None
        self.cross_attn = cross
        ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.bias, cfg.ffn_dropout)
        self.ffn = Residual(ffn, cfg)

    def forward(
        self,
        x: Tensor,
        *,
        positions: Tensor,
        pos: PositionalEncoding | None,
        causal: bool = False,
        padding_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: AttentionCache | None = None,
        cross_cache: AttentionCache | None = None,
        document_ids: Tensor | None = None,
        masks: MaskMemo | None = None,
    ) -> Tensor:
        """``masks``: the flex path's block masks, shared by the layers of one forward pass."""
        x = self.self_attn(
            x,
            lambda attn, h: attn(
                h,
                positions=positions,
                pos=pos,
                causal=causal,
                key_padding_mask=padding_mask,
                cache=cache,
                document_ids=document_ids,
                masks=masks,
            ),
        )
        if self.cross_attn is not None:
            x = self.cross_attn(
                x,
                lambda attn, h: attn(
                    h,
                    memory,
                    positions=positions,
                    key_padding_mask=memory_padding_mask,
                    cache=cross_cache,
                    masks=masks,
                ),
            )
        return self.ffn(x, lambda ffn, h: ffn(h))


def encoder_layer(cfg: LayerConfig) -> TransformerLayer:
    """Self-attention + feed-forward (also the decoder-only block, run with ``causal=True``)."""
    return TransformerLayer(cfg, cross_attention=False)


def decoder_layer(cfg: LayerConfig) -> TransformerLayer:
    """Masked self-attention + cross-attention + feed-forward."""
    return TransformerLayer(cfg, cross_attention=True)


class TransformerStack(nn.Module):
    """``n_layers`` layers and, for pre-norm stacks, the final norm.

    ``kept_heads`` prunes attention heads: the heads each attention module keeps, one entry per module
    in the order they run (per layer: self-attention, then cross-attention); None: every head.
    """

    def __init__(
        self,
        cfg: LayerConfig,
        n_layers: int,
        cross_attention: bool,
        final_norm: bool,
        kept_heads: Sequence[Sequence[int]] | None = None,
    ) -> None:
        super().__init__()
        per_layer = 2 if cross_attention else 1
        heads = list(kept_heads) if kept_heads is not None else [None] * (n_layers * per_layer)
        if len(heads) != n_layers * per_layer:
            raise ValueError(
                f"kept_heads has {len(heads)} entries: the stack has {n_layers * per_layer} attentions"
            )
        self.layers = nn.ModuleList(
            TransformerLayer(cfg, cross_attention, *heads[i * per_layer : (i + 1) * per_layer])
            for i in range(n_layers)
        )
        self.final_norm = (
            build_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.norm_bias) if final_norm else None
        )

    def forward(
        self,
        x: Tensor,
        *,
        positions: Tensor,
        pos: PositionalEncoding | None,
        causal: bool = False,
        padding_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        document_ids: Tensor | None = None,
    ) -> Tensor:
        """``document_ids`` (B, T): packed documents, each attending only to itself (self-attention)."""
        masks: MaskMemo = {}  # the flex path's block masks: built by the first layer, used by all
        for i, layer in enumerate(self.layers):
            x = layer(
                x,
                positions=positions,
                pos=pos,
                causal=causal,
                padding_mask=padding_mask,
                memory=memory,
                memory_padding_mask=memory_padding_mask,
                cache=cache.self_attn[i] if cache is not None else None,
                cross_cache=cache.cross_attn[i] if cache is not None and cache.cross_attn else None,
                document_ids=document_ids,
                masks=masks,
            )
        return self.final_norm(x) if self.final_norm is not None else x
