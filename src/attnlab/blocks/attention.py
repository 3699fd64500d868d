"""Multi-head attention: self-attention over the layer's own tokens, cross-attention over a context.

``SelfAttention`` projects queries, keys and values from one input with one matrix product, applies
its positional encoding (given when it is built: RoPE rotates queries and keys, ALiBi and T5's
buckets bias the scores), keeps keys in a KV cache and may slide a window. ``CrossAttention`` reads
its keys and values from the encoder's output (computed once per decoding, then cached). Both are a
``MultiHeadAttention``: grouped-query heads, a scale, optional QK-norm, head pruning, the output
projection, and the backend object that computes the attention (``attnlab.blocks.backends``: fused
SDPA, the softmax written out with a ``weights_probe``, or FlexAttention). What a forward pass sees
(positions, causality, padding, documents, caches, the encoder output) comes in an ``AttentionView``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnlab.blocks.backends import BACKENDS, CONFIGURABLE, Keys, backend_named, max_logits
from attnlab.blocks.cache import AttentionCache
from attnlab.blocks.hooks import AttentionHooks, OutputGate, Sinks, SoftCap, ValueResidual, soft_cap
from attnlab.blocks.masks import KeyRule
from attnlab.blocks.norm import RMSNorm
from attnlab.blocks.positional import PositionalEncoding, ScoreMod
from attnlab.blocks.roles import ParamRole, declare_roles
from attnlab.blocks.static_cache import StaticAttentionCache
from attnlab.blocks.view import AttentionView
from attnlab.schema.heads import kept_kv_groups
from attnlab.schema.hooks import AttnGate, AttnSink
from attnlab.schema.model import ModelConfig, check_heads

ATTENTION_PATHS = tuple(BACKENDS)  # fused kernels; the softmax written out (its weights probed); flex


class MultiHeadAttention(nn.Module):
    """What self- and cross-attention share: heads, scale, QK-norm, pruning and the backend.

    ``n_kv_heads`` < ``n_heads`` gives grouped-query attention (1 gives multi-query). ``scale``
    defaults to 1/sqrt(head_dim); T5 uses 1.0. ``qk_norm`` puts an RMSNorm (of epsilon ``norm_eps``)
    on each head's queries and keys, before RoPE, as Qwen3 does. ``backend`` is ``model.attn_backend``
    (``"sdpa"`` or ``"flex"``; ``record_attention`` switches to ``"explicit"``). ``head_ids`` builds a
    pruned module (``attnlab.compress.prune``): only those of the ``n_heads`` heads, whole key/value
    groups of them; the head size stays ``d_model // n_heads``, and a per-head score bias (ALiBi's
    slopes, T5's buckets) is taken at the kept heads' indices. A subclass makes the input projections,
    then calls ``_add_output``.
    """

    cross: ClassVar[bool] = False  # keys and values from a context rather than from the input
    window: int | None = None  # a sliding window over the keys (self-attention only)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = ModelConfig.n_kv_heads,
        *,
        dropout: float = ModelConfig.attn_dropout,
        scale: float | None = ModelConfig.attn_scale,
        qk_norm: bool = ModelConfig.qk_norm,
        norm_eps: float = ModelConfig.norm_eps,
        head_ids: Sequence[int] | None = None,
        backend: str = ModelConfig.attn_backend,
    ) -> None:
        super().__init__()
        if backend not in CONFIGURABLE:
            raise ValueError(f"attention backend {backend!r} is not one of {', '.join(CONFIGURABLE)}")
        check_heads(d_model, n_heads, n_kv_heads)
        self.head_dim = d_model // n_heads
        self.total_heads = n_heads  # before pruning: the index space of head_ids
        self.head_ids = tuple(range(n_heads)) if head_ids is None else tuple(head_ids)
        self.n_heads = len(self.head_ids)
        self.n_kv_heads = len(kept_kv_groups(self.head_ids, n_heads, n_kv_heads))
        pruned = torch.tensor(self.head_ids) if self.n_heads < n_heads else None
        self.register_buffer("bias_heads", pruned, persistent=False)  # None: every head kept
        self.scale = scale if scale is not None else 1.0 / math.sqrt(self.head_dim)
        self.dropout = dropout
        self.q_norm = RMSNorm(self.head_dim, norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, norm_eps) if qk_norm else None
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.split_sizes = (q_dim, kv_dim, kv_dim)  # the rows of queries, keys, values in a fused projection
        self.head_splits = (self.n_heads, self.n_kv_heads, self.n_kv_heads)  # the same, in heads
        self.backend = backend_named(backend)  # set for a whole model with use_attention_path()
        # hooks (blocks.hooks), set by self-attention where the config turns them on: instance
        # attributes, so that a submodule assigned later is found (a class attribute would shadow it)
        self.softcap: SoftCap | None = None
        self.sinks: Sinks | None = None
        self.gate: OutputGate | None = None

    def _add_output(self, d_model: int, bias: bool) -> None:
        """The output projection (its input: the heads concatenated) and the probe of the weights."""
        self.out_proj = nn.Linear(self.n_heads * self.head_dim, d_model, bias=bias)
        for name in ("qkv_proj", "q_proj", "kv_proj", "out_proj"):  # the projections: hidden matrices
            if name in self._modules:
                declare_roles(self._modules[name], weight=ParamRole.hidden_matrix)
        self.weights_probe = (
            nn.Identity()
        )  # the explicit backend passes its weights (B, H, Tq, Tk) through it

    @property
    def path(self) -> str:
        """The backend's name, one of ATTENTION_PATHS."""
        return self.backend.name

    @property
    def pos(self) -> PositionalEncoding | None:
        """The positional encoding whose hooks this module applies (None: none)."""
        return None

    def _split(self, x: Tensor, n: int) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.head_dim).transpose(1, 2)

    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The positional score bias (B, kept heads, Tq, Tk), or None."""
        pos = self.pos
        if pos is None:
            return None
        bias = pos.score_bias(q_pos, k_pos)
        if bias is None or self.bias_heads is None:
            return bias
        return bias.index_select(1, self.bias_heads)

    def score_mod(self, q_rows: Tensor, k_rows: Tensor) -> ScoreMod | None:
        """The positional score bias as FlexAttention's ``score_mod``, called with each kept head's
        index among the unpruned heads; None without a bias."""
        pos = self.pos
        score_mod = pos.score_mod(q_rows, k_rows) if pos is not None else None
        if score_mod is not None and self.bias_heads is not None:
            score_mod = _kept_heads(score_mod, self.bias_heads)
        return self.softcap.score_mod(score_mod) if self.softcap is not None else score_mod

    def _attend(
        self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, keys: Keys, view: AttentionView, dropped: int = 0
    ) -> Tensor:
        """The backend's attention of ``q`` over ``k``, ``v`` under ``keys``, heads joined, projected;
        ``dropped``: the keys a window trimmed from the cache (the padding mask still has their columns)."""
        if keys.padding is not None and tuple(keys.padding.shape) != (q.shape[0], k.shape[2]):
            raise ValueError(
                f"attention mask of shape {tuple(keys.padding.shape)} does not match the keys: expected "
                f"({q.shape[0]}, {k.shape[2] + dropped}), one entry per cached and new token"
            )
        y = self.backend.attend(self, q, k, v, keys, view.masks).transpose(1, 2)
        if self.gate is not None:
            y = self.gate(x, y)
        return self.out_proj(y.reshape(x.shape[0], x.shape[1], -1))


def _kept_heads(score_mod: ScoreMod, heads: Tensor) -> ScoreMod:
    """``score_mod`` called with each kept head's index among the unpruned heads."""

    def kept(score: Tensor, b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
        return score_mod(score, b, heads[h], q, k)

    return kept


class SelfAttention(MultiHeadAttention):
    """Attention of a layer's tokens to each other (and to the cached ones), with its positional hooks.

    ``pos`` is the stack's positional encoding (owned by the embedding, which registers its weights;
    referenced here, not registered again). ``window`` limits attention to keys less than ``window``
    positions away (before the query when causal); a KV cache then keeps only the last ``window`` keys.
    ``hooks`` (``attention_hooks``): soft-capping, sinks, an output gate, a value residual
    (``blocks.hooks``); ``shares_values``: this layer's values are the ones later layers mix in.
    ``settings``: those of ``MultiHeadAttention``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = ModelConfig.n_kv_heads,
        *,
        bias: bool = ModelConfig.bias,
        window: int | None = ModelConfig.attn_window,
        pos: PositionalEncoding | None = None,
        hooks: AttentionHooks | None = None,
        shares_values: bool = False,
        **settings: Any,
    ) -> None:
        super().__init__(d_model, n_heads, n_kv_heads, **settings)
        if window is not None and window < 1:
            raise ValueError(f"attention window={window}: must be positive")
        self.window = window
        self.shared_pos = (pos,) if pos is not None else ()  # a tuple keeps it out of the submodules
        self.qkv_proj = nn.Linear(d_model, sum(self.split_sizes), bias=bias)  # one product for q, k, v
        self._add_output(d_model, bias)
        self.shares_values = shares_values
        self.logit_record: tuple[dict[str, Tensor], str] | None = None  # blocks.qk_clip.recording
        self.value_residual = None
        if hooks is not None:
            self._add_hooks(hooks, d_model, shares_values)

    def _add_hooks(self, hooks: AttentionHooks, d_model: int, shares_values: bool) -> None:
        """The hooks ``hooks`` turns on, each a submodule (or, for soft-capping, a function)."""
        self.softcap = soft_cap(hooks.softcap)
        if hooks.sink != AttnSink.none:
            self.sinks = Sinks(hooks.sink, self.n_heads, hooks.sink_init)
        if hooks.gate != AttnGate.none:
            self.gate = OutputGate(hooks.gate, d_model, self.n_heads, self.head_dim, hooks.gate_offset)
        if hooks.value_residual is not None and not shares_values:
            self.value_residual = ValueResidual(self.n_kv_heads, hooks.value_residual, hooks.value_learned)

    @property
    def pos(self) -> PositionalEncoding | None:
        return self.shared_pos[0] if self.shared_pos else None

    def _qkv_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries (B, H, T, hd), keys and values (B, Hkv, T, hd) of ``x`` (B, T, D), views of one product.

        The fused product is split along its heads before the heads move in front of the positions, as
        nanoGPT does: the backward pass then concatenates three gradients laid out as the product
        already is (the fused kernels return them in their inputs' layout) with no copy. Splitting after
        the transpose cost a copy of the whole product's gradient per layer (about 0.5 ms of a 40 ms
        training step at nanoGPT's baby size), and three narrows a zero-filled gradient each.
        """
        if "qkv_proj" not in self._modules:  # split by the tensor-parallel plan (models.parallel)
            projections = (self.q_proj, self.k_proj, self.v_proj)
            q, k, v = (self._split(p(x), n) for p, n in zip(projections, self.head_splits, strict=True))
            return q, k, v
        b, t, _ = x.shape
        heads = self.qkv_proj(x).view(b, t, self.n_heads + 2 * self.n_kv_heads, self.head_dim)
        q, k, v = heads.split(self.head_splits, dim=2)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def forward(
        self, x: Tensor, view: AttentionView, cache: AttentionCache | StaticAttentionCache | None = None
    ) -> Tensor:
        """Attend from ``x`` (B, T, D) at ``view.positions`` to itself and the keys in ``cache``.

        ``view.padding`` covers every key, cached ones included; ``view.documents`` (B, T) pack several
        documents into one sequence: a query sees only keys of its own document (no cache then;
        decoding runs one document at a time).
        """
        if view.documents is not None and cache is not None:
            raise ValueError(
                "document ids apply to self-attention over a packed sequence without a KV cache "
                "(decode one document at a time)"
            )
        q, k, v = self._qkv_heads(x)
        if self.shares_values:
            view.first_values = v
        elif self.value_residual is not None:
            if view.first_values is None:
                raise ValueError("a value residual needs the first layer's values (model.value_residual)")
            v = self.value_residual(v, view.first_values)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        positions, padding, pos = view.positions, view.padding, self.pos
        if pos is not None:
            q, k = pos.rotate(q, k, positions, positions)
        k_pos = positions
        if cache is not None:
            if padding is not None:  # it has columns for the keys a window trimmed before
                padding = padding[:, cache.dropped :]
            k, v, k_pos = cache.append(k, v, positions, keep=self.window if view.causal else None)
            padding = written_only(cache, padding, q.shape[0])
        keys = Keys(
            positions, k_pos, KeyRule(causal=view.causal, window=self.window), padding, view.documents
        )
        if self.logit_record is not None:
            self._record_max_logits(q, k, keys)
        return self._attend(x, q, k, v, keys, view, cache.dropped if cache is not None else 0)

    def _record_max_logits(self, q: Tensor, k: Tensor, keys: Keys) -> None:
        """Keep each head's largest logit of this pass (the largest of all passes while recording)."""
        found, name = self.logit_record
        largest = max_logits(q, k, keys, self.scale)
        found[name] = largest if name not in found else torch.maximum(found[name], largest)


class CrossAttention(MultiHeadAttention):
    """Attention of a decoder's tokens to a context (``view.memory``, the encoder output of width
    ``d_context``): every query sees every real context token, whose keys and values a cache keeps
    from the first decoding step on. ``settings``: those of ``MultiHeadAttention``."""

    cross = True

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = ModelConfig.n_kv_heads,
        *,
        bias: bool = ModelConfig.bias,
        d_context: int | None = None,
        **settings: Any,
    ) -> None:
        super().__init__(d_model, n_heads, n_kv_heads, **settings)
        q_dim, kv_dim, _ = self.split_sizes
        self.q_proj = nn.Linear(d_model, q_dim, bias=bias)  # queries from the decoder
        self.kv_proj = nn.Linear(d_context or d_model, 2 * kv_dim, bias=bias)  # keys, values from the context
        self._add_output(d_model, bias)

    def _kv_heads(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values (B, Hkv, S, hd) of the context (B, S, D), keys QK-normed."""
        if "kv_proj" in self._modules:
            k, v = self.kv_proj(context).chunk(2, dim=-1)
        else:  # split by the tensor-parallel plan (models.parallel)
            k, v = self.k_proj(context), self.v_proj(context)
        k, v = self._split(k, self.n_kv_heads), self._split(v, self.n_kv_heads)
        return (k if self.k_norm is None else self.k_norm(k)), v

    def forward(self, x: Tensor, view: AttentionView, cache: AttentionCache | None = None) -> Tensor:
        """Attend from ``x`` (B, T, D) to ``view.memory`` (B, S, D), or to the keys and values that
        ``cache`` kept from it; ``view.memory_padding`` (B, S) marks its real tokens."""
        q = self._split(self.q_proj(x), self.n_heads)
        if cache is not None and cache.k is not None:
            k, v = cache.k, cache.v
        else:
            if view.memory is None:
                raise ValueError("cross-attention needs a context (the encoder output) or a filled cache")
            k, v = self._kv_heads(view.memory)
            if cache is not None:
                cache.k, cache.v = k, v
        q = q if self.q_norm is None else self.q_norm(q)
        k_pos = torch.arange(k.shape[2], device=x.device)
        return self._attend(
            x, q, k, v, Keys(view.positions, k_pos, KeyRule(), view.memory_padding, None), view
        )


def written_only(
    cache: AttentionCache | StaticAttentionCache, key_padding_mask: Tensor | None, batch: int
) -> Tensor | None:
    """The key padding mask (B, Tk) with a static cache's unwritten columns hidden as well (a growing
    cache holds written keys only: its mask is returned as it is)."""
    if not cache.static:
        return key_padding_mask
    written = cache.written_keys().expand(batch, -1)
    return written if key_padding_mask is None else key_padding_mask.bool() & written


def attention_modules(model: nn.Module) -> dict[str, MultiHeadAttention]:
    """Every attention module of ``model`` by name, in the order the model runs them."""
    return {name: m for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)}


@contextmanager
def swapped_backends(modules: list[MultiHeadAttention], backend: object) -> Iterator[None]:
    """Run ``modules`` on ``backend`` while the block runs, each back on its own backend after."""
    previous = [m.backend for m in modules]
    for m in modules:
        m.backend = backend
    try:
        yield
    finally:
        for m, p in zip(modules, previous):
            m.backend = p


@contextmanager
def use_attention_path(model: nn.Module, path: str) -> Iterator[None]:
    """Run every attention module of ``model`` on ``path`` (one of ATTENTION_PATHS) while the block runs."""
    with swapped_backends(list(attention_modules(model).values()), backend_named(path)):
        yield


@contextmanager
def record_attention(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Collect attention weights of every attention module of ``model`` while the block runs.

    Yields a dict, filled by each forward pass, from module name (``layers.0.self_attn.fn``
    style, as in ``model.named_modules()``) to its weights (B, H, Tq, Tk). The explicit path runs
    while recording, so use it for inspection, not for speed.
    """
    maps: dict[str, Tensor] = {}

    def keep(name: str):
        return lambda _probe, _inputs, weights: maps.__setitem__(name, weights)

    modules = attention_modules(model)
    hooks = [m.weights_probe.register_forward_hook(keep(n)) for n, m in modules.items()]
    try:
        with use_attention_path(model, "explicit"):
            yield maps
    finally:
        for hook in hooks:
            hook.remove()
