"""One default per setting, in the schema: every default a block's constructor (or builder, or settings
dataclass) has is either the schema's value of that setting, or belongs to no setting at all."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

from torch import nn

import attnlab.blocks
from attnlab.schema.model import BertConfig, GPTConfig, ModelConfig
from attnlab.schema.pos import RelativePos, RopePos, SinusoidalPos

# (block, argument) -> the schema's default of the setting it takes
SETTINGS = {
    ("MultiHeadAttention", "bias"): ModelConfig.bias,
    ("MultiHeadAttention", "dropout"): ModelConfig.attn_dropout,
    ("MultiHeadAttention", "scale"): ModelConfig.attn_scale,
    ("MultiHeadAttention", "window"): ModelConfig.attn_window,
    ("MultiHeadAttention", "qk_norm"): ModelConfig.qk_norm,
    ("MultiHeadAttention", "norm_eps"): ModelConfig.norm_eps,
    ("MultiHeadAttention", "backend"): ModelConfig.attn_backend,
    ("MultiHeadAttention", "n_kv_heads"): ModelConfig.n_kv_heads,
    ("FeedForward", "activation"): ModelConfig.activation,
    ("FeedForward", "bias"): ModelConfig.bias,
    ("FeedForward", "dropout"): ModelConfig.ffn_dropout,
    ("RMSNorm", "eps"): ModelConfig.norm_eps,
    ("build_norm", "eps"): ModelConfig.norm_eps,
    ("build_norm", "bias"): ModelConfig.norm_bias,
    ("SinusoidalPositionalEncoding", "layout"): SinusoidalPos.layout,
    ("RotaryPositionalEncoding", "base"): RopePos.rope_base,
    ("RelativePositionBias", "num_buckets"): RelativePos.num_buckets,
    ("RelativePositionBias", "max_distance"): RelativePos.max_distance,
    ("RopeScaling", "kind"): RopePos.rope_scaling,
    ("RopeScaling", "factor"): RopePos.rope_factor,
    ("RopeScaling", "beta_fast"): RopePos.rope_beta_fast,
    ("RopeScaling", "beta_slow"): RopePos.rope_beta_slow,
    ("RopeScaling", "attention_factor"): RopePos.rope_attn_factor,
    ("RopeScaling", "mscale"): RopePos.rope_mscale,
    ("RopeScaling", "mscale_all_dim"): RopePos.rope_mscale_all_dim,
    ("RopeScaling", "truncate"): RopePos.rope_truncate,
}
# Defaults that are no setting of the schema: how a block is wired, or state
NOT_SETTINGS = {
    ("MultiHeadAttention", "cross"),  # a decoder layer's second attention
    ("MultiHeadAttention", "d_context"),  # cross-attention's context width (None: d_model)
    ("MultiHeadAttention", "head_ids"),  # a pruned module's heads (model.kept_heads, per module)
    ("SinusoidalPositionalEncoding", "base"),  # the paper's 10000: no setting chooses another
    ("RotaryPositionalEncoding", "scaling"),  # None: no scaling (RopeScaling's defaults)
    ("RopeScaling", "original_max_len"),  # the schema's None means the model's max_seq_len
    ("RelativePositionBias", "bidirectional"),  # from the stack's causality, not a setting
    ("LMHead", "tied_to"),  # the token table it shares (model.tie_embeddings), built before it
    ("LMHead", "scale"),  # T5's d_model**-0.5 where model.tied_output_scale, else 1
    ("TransformerLayer", "cross_attention"),
    ("TransformerLayer", "self_heads"),
    ("TransformerLayer", "cross_heads"),
    ("TransformerStack", "kept_heads"),
    ("KeyRule", "causal"),
    ("KeyRule", "window"),
    *(
        ("AttentionCache", name)
        for name in ("k", "v", "positions", "dropped", "reserve", "_buffers", "_start")
    ),
}


def block_defaults() -> dict[tuple[str, str], object]:
    """(block, argument) -> default, over every module of attnlab.blocks: ``nn.Module`` constructors,
    dataclass fields and ``build_*`` functions."""
    found: dict[tuple[str, str], object] = {}
    for info in pkgutil.iter_modules(attnlab.blocks.__path__):
        module = importlib.import_module(f"attnlab.blocks.{info.name}")
        for name, obj in vars(module).items():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
                defaults = {f.name: f.default for f in dataclasses.fields(obj)}
            elif inspect.isclass(obj) and issubclass(obj, nn.Module):
                defaults = {p.name: p.default for p in inspect.signature(obj.__init__).parameters.values()}
            elif inspect.isfunction(obj) and name.startswith("build"):
                defaults = {p.name: p.default for p in inspect.signature(obj).parameters.values()}
            else:
                continue
            for arg, default in defaults.items():
                if default is not inspect.Parameter.empty and default is not dataclasses.MISSING:
                    found[(name, arg)] = default
    return found


def test_every_block_default_is_the_schemas_or_no_setting() -> None:
    found = block_defaults()
    assert ("MultiHeadAttention", "norm_eps") in found  # the scan reads the blocks
    unknown = set(found) - set(SETTINGS) - NOT_SETTINGS
    assert not unknown, (
        f"a default outside the schema: {sorted(unknown)}; take it from the schema or require it"
    )
    differ = {
        key: (found[key], SETTINGS[key]) for key in SETTINGS if key in found and found[key] != SETTINGS[key]
    }
    assert not differ, f"block default != schema default: {differ}"


def test_layer_settings_are_the_model_configs() -> None:
    """LayerConfig has no defaults of its own: each of its fields is the model config's."""
    from attnlab.blocks.layers import LayerConfig

    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(LayerConfig))
    for cfg in (GPTConfig(), BertConfig(norm_eps=1e-12, dropout=0.3)):
        layer = LayerConfig.of(cfg)
        shared = {f.name for f in dataclasses.fields(LayerConfig)} - {"d_ff"}
        assert {name: getattr(layer, name) for name in shared} == {
            name: getattr(cfg, name) for name in shared
        }


def test_the_ignored_label_is_written_once() -> None:
    """The label no loss scores is ``schema.data.IGNORE_INDEX``; nothing else spells -100."""
    import re
    from pathlib import Path

    src = Path(attnlab.blocks.__file__).resolve().parents[1]
    literal = re.compile(r"(?<![\w.\-])-100\b")  # not the 0-100 of a BLEU scale
    found = [
        (str(path.relative_to(src)), line)
        for path in sorted(src.rglob("*.py"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if literal.search(line)
    ]
    assert found == [("schema/data.py", "IGNORE_INDEX = -100")]
