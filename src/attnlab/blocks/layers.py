"""Transformer layers: residual sublayers around attention and feed-forward.

An encoder layer is self-attention + feed-forward; a decoder layer adds cross-attention to the
encoder's output between them. Decoder-only models use the encoder layer with a causal view.
Layers and stacks take the model config itself (``schema.model.ModelConfig``): every setting and its
default live there once. What a forward pass sees comes down as one ``AttentionView``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from attnlab.blocks.attention import CrossAttention
from attnlab.blocks.cache import AttentionCache
from attnlab.blocks.ffn import FeedForward, ffn_width
from attnlab.blocks.mixers.registry import build_mixer
from attnlab.blocks.norm import build_norm
from attnlab.blocks.positional import PositionalEncoding
from attnlab.blocks.view import AttentionView
from attnlab.schema.layout import LayerKind, parse_layout
from attnlab.schema.mixers import Mixer
from attnlab.schema.model import ModelConfig

Heads = Sequence[int] | None  # the heads an attention module keeps (attnlab.compress.prune); None: all


def norm_of(cfg: ModelConfig) -> nn.Module:
    """The model's norm (``model.norm``, ``norm_eps``, ``norm_bias``) over its width."""
    return build_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.norm_bias)


class Residual(nn.Module):
    """A sublayer ``fn`` with its norm and residual connection; its extra arguments are ``fn``'s.

    Pre-norm: ``x + dropout(fn(norm(x)))``; post-norm (the original paper): ``norm(x + dropout(fn(x)))``.
    ``model.post_norms`` adds a norm on the sublayer's output of a pre-norm block (Gemma 2's sandwich):
    ``x + dropout(post_norm(fn(norm(x))))``.
    """

    def __init__(self, fn: nn.Module, cfg: ModelConfig) -> None:
        super().__init__()
        self.fn = fn
        self.norm = norm_of(cfg)
        self.post_norm = norm_of(cfg) if cfg.post_norms else None
        self.norm_first = cfg.norm_first
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, *args: object) -> Tensor:
        if self.post_norm is not None:
            return x + self._dropout(self.post_norm(self.fn(self.norm(x), *args)))
        if self.norm_first:
            return x + self._dropout(self.fn(self.norm(x), *args))
        return self.norm(x + self._dropout(self.fn(x, *args)))

    def _dropout(self, y: Tensor) -> Tensor:
        """Dropout only where it acts (training, p > 0): skipping the identity saves a call per token step."""
        return self.dropout(y) if self.training and self.dropout.p > 0 else y


def attention_settings(cfg: ModelConfig, heads: Heads) -> dict[str, object]:
    """What self- and cross-attention both take from the model config."""
    return dict(
        n_kv_heads=cfg.n_kv_heads,
        bias=cfg.bias,
        dropout=cfg.attn_dropout,
        scale=cfg.attn_scale,
        qk_norm=cfg.qk_norm,
        norm_eps=cfg.norm_eps,
        head_ids=heads,
        backend=cfg.attn_backend,
    )


class TransformerLayer(nn.Module):
    """Self-attention (applying ``pos``), optional cross-attention, feed-forward (none when
    ``model.d_ff=0``: an attention-only layer); each a ``Residual`` sublayer. ``self_heads`` and
    ``cross_heads`` prune their attention to those heads (None: all). ``kind`` is the layer's entry of
    the layout (``schema.layout``): its mixer (``blocks.mixers``: softmax attention, latent or
    differential attention, gated DeltaNet), its window and whether it applies ``pos``; ``index`` its
    place (the first layer's values are the ones a value residual mixes in; λ_init's layer number)."""

    def __init__(
        self,
        cfg: ModelConfig,
        pos: PositionalEncoding | None,
        cross_attention: bool = False,
        self_heads: Heads = None,
        cross_heads: Heads = None,
        kind: LayerKind | None = None,
        index: int = 0,
    ) -> None:
        super().__init__()
        kind = kind or LayerKind(str(cfg.mixer), sliding=cfg.attn_window is not None)
        attn = build_mixer(cfg, kind, pos, index, attention_settings(cfg, self_heads))
        self.mixer = kind.mixer
        self.self_attn = Residual(attn, cfg)
        self.cross_attn = None
        if cross_attention:
            cross = CrossAttention(cfg.d_model, cfg.n_heads, **attention_settings(cfg, cross_heads))
            self.cross_attn = Residual(cross, cfg)
        d_ff = ffn_width(cfg.d_model, cfg.d_ff, cfg.ffn_mult)
        self.ffn = None  # d_ff=0: an attention-only layer (the residual stream passes by unchanged)
        if d_ff > 0:
            ffn = FeedForward(cfg.d_model, d_ff, cfg.activation, cfg.bias, cfg.ffn_dropout)
            self.ffn = Residual(ffn, cfg)

    def forward(
        self,
        x: Tensor,
        view: AttentionView,
        caches: tuple[AttentionCache | None, AttentionCache | None] = (None, None),
    ) -> Tensor:
        """``caches``: this layer's self- and cross-attention caches (``view.layer_caches``)."""
        x = self.self_attn(x, view, caches[0])
        if self.cross_attn is not None:
            x = self.cross_attn(x, view, caches[1])
        return self.ffn(x) if self.ffn is not None else x


def encoder_layer(cfg: ModelConfig, pos: PositionalEncoding | None = None) -> TransformerLayer:
    """Self-attention + feed-forward (also the decoder-only block, run with a causal view)."""
    return TransformerLayer(cfg, pos, cross_attention=False)


def decoder_layer(cfg: ModelConfig, pos: PositionalEncoding | None = None) -> TransformerLayer:
    """Masked self-attention + cross-attention + feed-forward."""
    return TransformerLayer(cfg, pos, cross_attention=True)


class TransformerStack(nn.Module):
    """``n_layers`` layers and, for pre-norm stacks, the final norm.

    ``pos`` is the positional encoding every self-attention applies (the embedding owns it).
    ``kept_heads`` prunes attention heads: the heads each attention module keeps, one entry per module
    in the order they run (per layer: self-attention, then cross-attention); None: every head.
    Each layer's kind (mixer, window, positions) is ``model.layout``'s entry, ``model.mixer`` where it
    names none (softmax attention in a stack with cross-attention).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        n_layers: int,
        pos: PositionalEncoding | None,
        *,
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
        mixer = Mixer.attention if cross_attention else cfg.mixer  # a decoder with cross-attention: softmax
        kinds = parse_layout(cfg.layout, n_layers, cfg.attn_window, mixer)
        self.layers = nn.ModuleList(
            TransformerLayer(
                cfg, pos, cross_attention, *heads[i * per_layer : (i + 1) * per_layer], kind=kinds[i], index=i
            )
            for i in range(n_layers)
        )
        self.final_norm = norm_of(cfg) if final_norm else None

    def forward(self, x: Tensor, view: AttentionView) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, view, view.layer_caches(i))
        return self.final_norm(x) if self.final_norm is not None else x
