"""The model schema: what the builders in ``attnlab.models`` consume (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field

FAMILIES = ("gpt", "bert", "seq2seq", "vit")
POSITIONAL_ENCODINGS = ("none", "sinusoidal", "learned", "rope", "alibi", "relative")
# Mirrors of the names the torch modules accept (tests/cli/test_train_config.py keeps them in step).
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu", "geglu_tanh")
NORMS = ("layernorm", "rmsnorm")
POOLINGS = ("cls", "mean", "max")


@dataclass
class PosConfig:
    """Positional encoding: ``name`` plus the parameters of the kinds that have any."""

    name: str = "learned"
    rope_base: float = 10000.0
    num_buckets: int = 32
    max_distance: int = 128
    layout: str = "interleaved"


@dataclass
class ModelConfig:
    """One schema for every family; fields a family does not use are ignored by its builder."""

    family: str = "gpt"
    vocab_size: int = 0  # 0: taken from the data's tokenizer at build time
    d_model: int = 128
    n_layers: int = 4
    n_decoder_layers: int | None = None  # seq2seq; None: same as n_layers
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: n_heads (grouped-query when smaller)
    d_ff: int | None = None  # None: ffn_mult * d_model
    ffn_mult: float = 4.0
    activation: str = "gelu"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    norm_first: bool = True  # pre-norm; False is the original paper's post-norm
    norm_bias: bool = True
    final_norm: bool | None = None  # None: a final norm exactly when norm_first
    embed_norm: bool = False  # norm after the embeddings (BERT, BLOOM)
    bias: bool = True  # biases on attention and feed-forward projections
    dropout: float = 0.1
    attn_dropout: float = 0.0
    ffn_dropout: float = 0.0
    attn_scale: float | None = None  # None: 1/sqrt(head_dim)
    max_seq_len: int = 256
    tie_embeddings: bool = True
    embed_scale: bool = False  # multiply token embeddings by sqrt(d_model)
    share_embeddings: bool = True  # seq2seq: one table for source and target
    lm_head_bias: bool = False
    tied_output_scale: bool = False  # T5: hidden * d_model**-0.5 before a tied output projection
    type_vocab_size: int = 0  # >0 adds segment embeddings (BERT's token types)
    mlm_head: bool = True  # encoder: build the masked-LM head
    num_classes: int = 0  # >0 builds a classification head
    pooling: str = "cls"
    classifier_hidden: bool = False  # BERT's pooler (dense + tanh) before the classifier
    image_size: int = 32
    patch_size: int = 4
    channels: int = 3  # 0: from the data (1 when every training image is grey, else 3)
    init_std: float = 0.02
    init_from: str | None = None  # a local Hugging Face checkpoint directory
    pos: PosConfig = field(default_factory=PosConfig)
