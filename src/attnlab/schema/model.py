"""The model schemas: one class per family (``family`` is the tag, chosen with ``model=<preset>``),
each holding only the fields its builder in ``attnlab.models`` reads (torch-free).

    ModelConfig                     the layers, norms, dropout, init, positions: every family
    ├── TokenModelConfig            token embeddings and sequence length: gpt, bert, seq2seq
    │   ├── GPTConfig               decoder-only
    │   ├── BertConfig              encoder-only (+ ClassifierConfig)
    │   └── Seq2SeqConfig           encoder-decoder
    └── ClassifierConfig            a pooled classification head: bert, vit
        └── ViTConfig               image patches

The defaults of each family class are what ``model=<family>`` trains; presets in ``conf/model/`` hold
only what differs from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from omegaconf import MISSING

from attnlab.schema.choice import Choice, TaggedUnion, missing
from attnlab.schema.data import DataKind
from attnlab.schema.errors import ConfigError, fraction, not_negative, positive
from attnlab.schema.heads import check_kept_heads
from attnlab.schema.hooks import AttnGate, AttnSink, check_layout_and_hooks
from attnlab.schema.layout import LayerKind, parse_layout
from attnlab.schema.mixers import Mixer, MixerSizes, check_model_mixers
from attnlab.schema.pos import POSITIONS, AnyPosConfig, LearnedPos, PosConfig, SinusoidalPos
from attnlab.schema.task import TaskName


class Family(Choice):
    gpt = "gpt"
    bert = "bert"
    seq2seq = "seq2seq"
    vit = "vit"


class Activation(Choice):
    """Of the feed-forward network; the last three are gated (SwiGLU, GeGLU, T5 v1.1's GeGLU)."""

    relu = "relu"
    gelu = "gelu"
    gelu_tanh = "gelu_tanh"
    silu = "silu"
    swiglu = "swiglu"
    geglu = "geglu"
    geglu_tanh = "geglu_tanh"


class Norm(Choice):
    layernorm = "layernorm"
    rmsnorm = "rmsnorm"


class AttnBackend(Choice):
    """The kernel that computes attention: ``scaled_dot_product_attention`` with a dense mask, or
    FlexAttention, which takes masks and score biases (ALiBi, relative) as functions of positions and
    never builds a (B, H, T, T) tensor. In torch 2.13 FlexAttention has no backward on the CPU."""

    sdpa = "sdpa"
    flex = "flex"
    explicit = "explicit"  # the softmax written out: every score hook, at the cost of (B, H, T, T) scores


# Why model.attn_backend=flex does not train on the CPU (the training refusal and the block's error)
FLEX_CPU_BACKWARD = (
    "FlexAttention has no backward on CPU in torch 2.13; train with sdpa, evaluate or sample with flex"
)


class Parametrization(Choice):
    """How initialisation, output and learning rates scale with the width (``models.parametrization``)."""

    sp = "sp"  # standard: the same init_std and learning rate at every width
    mup = "mup"  # μP (Yang et al. 2021): hidden init and Adam rates by 1/width, logits by 1/width


class Pooling(Choice):
    """How a classifier reduces the positions: the first (CLS) token, or the mean or max over them."""

    cls = "cls"
    mean = "mean"
    max = "max"


MODELS = TaggedUnion("model", "family", "model={}")


@dataclass
class ModelConfig:
    """What every family's builder reads; ``family`` is the tag."""

    family: str = MISSING  # a str, not the Family enum: a family registered outside attnlab has its own tag
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: n_heads (grouped-query when smaller)
    d_ff: int | None = None  # None: ffn_mult * d_model; 0: no feed-forward sublayer (attention-only layers)
    ffn_mult: float = 4.0
    activation: Activation = Activation.gelu
    norm: Norm = Norm.layernorm
    norm_eps: float = 1e-5
    norm_first: bool = True  # pre-norm; False is the original paper's post-norm
    norm_bias: bool = True
    final_norm: bool | None = None  # None: a final norm exactly when norm_first
    bias: bool = True  # biases on attention and feed-forward projections
    dropout: float = 0.1
    attn_dropout: float = 0.0
    ffn_dropout: float = 0.0
    attn_scale: float | None = None  # None: 1/sqrt(head_dim)
    # Sliding-window self-attention: a query sees the keys less than attn_window positions away (itself
    # included), before it in a decoder (Mistral's window), on both sides in an encoder. None: no window.
    # Cross-attention is never windowed.
    attn_window: int | None = None
    qk_norm: bool = False  # RMSNorm on each head's queries and keys, before RoPE (Qwen3, OLMo 2)
    # Per layer: window, positions, mixer (schema.layout: "sliding full ...", "3*pos nope ...", HF
    # layer_types); None: every layer alike. Typed Any: a string or a list. Then the attention hooks
    # (docs/attention.md), each off by default:
    layout: Any = None
    attn_softcap: float | None = None  # scores -> cap * tanh(scores / cap) (Gemma 2); None or inf: off
    attn_sink: AttnSink = AttnSink.none  # a per-head logit in the softmax denominator: learned or fixed 0
    attn_sink_init: float = 0.0  # the learned sinks' initial value (-inf: the identity)
    attn_gate: AttnGate = AttnGate.none  # sigmoid gate on the attention output before out_proj (Qwen3-Next)
    attn_gate_offset: float = 0.0  # added to the gate's logits (inf: the gate always open, the identity)
    value_residual: float | None = None  # ResFormer: values mixed with the first layer's, this initial weight
    value_residual_learned: bool = True  # the mix weight (one per head and layer) trains
    post_norms: bool = False  # a norm on each sublayer's output too, before the residual sum (Gemma 2)
    attn_backend: AttnBackend = AttnBackend.sdpa  # flex: FlexAttention (no weights: eval may switch it)
    # Every layer's token mixer (attnlab.schema.mixers): softmax attention, or latent attention
    # (DeepSeek), differential attention (DiffLlama) or gated DeltaNet (Qwen3-Next), sized by mixers.
    mixer: Mixer = Mixer.attention
    mixers: MixerSizes = field(default_factory=MixerSizes)
    init_std: float = 0.02
    # mup: the settings tuned at d_model = mup_base_width (learning rate, init_std) hold at other widths
    parametrization: Parametrization = Parametrization.sp
    mup_base_width: int = 128
    init_from: str | None = None  # a local Hugging Face checkpoint directory
    # The positional encoding, chosen with pos=<name>: a PosConfig class (see schema.pos.AnyPosConfig)
    pos: AnyPosConfig = MISSING
    # Written by attnlab-compress method=prune_heads: the heads each attention module keeps, as their
    # indices among n_heads, one list per module in the order the model runs them (seq2seq: the
    # encoder's layers, then each decoder layer's self- and cross-attention). None: every head.
    kept_heads: list[list[int]] | None = None

    default_pos: ClassVar[type[PosConfig]] = LearnedPos  # what a Python caller gets without a pos
    causal_stack: ClassVar[bool] = False  # its stack is causal: it can hold a causal-only mixer (deltanet)
    holds_mixers: ClassVar[bool] = True  # its stacks take model.mixer (schema.mixers)
    # What the family trains: each task it can learn, and the data kinds it reads for that task (the
    # first is the one the task's preset picks). Checked between groups by ``schema.checks``.
    trains: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __post_init__(self) -> None:
        if missing(self.pos):
            self.pos = self.default_pos()

    def check(self) -> None:
        """Sizes, fractions, the heads and the positional encoding (what the builders would reject)."""
        MODELS.check_tag(self)
        for name in ("d_model", "n_layers", "n_heads", "ffn_mult", "norm_eps", "init_std", "mup_base_width"):
            positive(f"model.{name}", getattr(self, name))
        if self.parametrization == Parametrization.mup and self.init_from is not None:
            raise ConfigError(
                "model.parametrization",
                "mup",
                f"model.init_from={self.init_from} is a Hugging Face checkpoint, trained in the standard "
                "parametrisation: load it with model.parametrization=sp",
            )
        for name in ("n_kv_heads", "attn_scale", "attn_window"):
            positive(f"model.{name}", getattr(self, name), allow_none=True)
        if self.d_ff is not None:
            not_negative("model.d_ff", self.d_ff)  # 0: attention-only layers
        check_heads(self.d_model, self.n_heads, self.n_kv_heads)
        for name in ("dropout", "attn_dropout", "ffn_dropout"):
            fraction(f"model.{name}", getattr(self, name))
        if self.attn_backend == AttnBackend.flex and self.attn_dropout > 0:
            raise ConfigError(
                "model.attn_dropout",
                self.attn_dropout,
                "FlexAttention (model.attn_backend=flex) has no dropout on the attention weights; "
                "set model.attn_dropout=0 or use model.attn_backend=sdpa",
            )
        if not isinstance(self.pos, PosConfig):
            raise ConfigError("model.pos", self.pos, "choose the positional encoding with pos=<name>")
        POSITIONS.check_tag(self.pos)
        self.pos.check(self.d_model, self.n_heads)
        check_layout_and_hooks(self)
        self.check_mixers()
        if self.kept_heads is not None:
            check_kept_heads(self.kept_heads, self.attention_modules(), self.n_heads, self.n_kv_heads)

    def layer_kinds(self) -> list[LayerKind]:
        """Each layer's kind (``schema.layout``): its mixer (``model.mixer`` where the layout names none),
        window and positions."""
        return parse_layout(self.layout, self.n_layers, self.attn_window, self.mixer)

    def attention_modules(self) -> int:
        """How many attention modules the family's model has (one per layer; seq2seq: more)."""
        return self.n_layers

    def layer_mixers(self) -> list[str]:
        """Each layer's mixer kind (``schema.mixers``), in order."""
        return [kind.mixer for kind in self.layer_kinds()]

    def check_mixers(self) -> None:
        """The mixers' sizes, and the combinations that cannot work (``schema.mixers``, one line each)."""
        check_model_mixers(self, self.layer_mixers())


@dataclass
class TokenModelConfig(ModelConfig):
    """The families that read token ids: the embedding table and the longest sequence."""

    vocab_size: int = 0  # 0: taken from the data's tokenizer at build time
    max_seq_len: int = 256  # the size of a learned positional table
    # Multiply token embeddings by sqrt(d_model) (and start them at N(0, 1/d_model)): true, false, or
    # "auto", exactly for pos=sinusoidal, whose fixed table would otherwise swamp the tokens
    # (attnlab.models.common.scales_embeddings). Typed Any because OmegaConf has no bool | str field.
    embed_scale: Any = "auto"
    embed_norm: bool = False  # norm after the embeddings (BERT, BLOOM)
    tie_embeddings: bool = True  # the output projection is the token table

    def check(self) -> None:
        super().check()
        not_negative("model.vocab_size", self.vocab_size)
        positive("model.max_seq_len", self.max_seq_len)
        if not (isinstance(self.embed_scale, bool) or self.embed_scale == "auto"):
            raise ConfigError("model.embed_scale", self.embed_scale, "choose true, false or auto")


@dataclass
class ClassifierConfig(ModelConfig):
    """The families that can classify: a pooled head over the last hidden states."""

    num_classes: int = 0  # >0 builds a classification head; 0: the data's number of classes
    pooling: Pooling = Pooling.cls
    classifier_hidden: bool = False  # BERT's pooler (dense + tanh) before the classifier

    def check(self) -> None:
        super().check()
        not_negative("model.num_classes", self.num_classes)


@MODELS.register
@dataclass
class GPTConfig(TokenModelConfig):
    """Decoder-only, GPT-like: a small pre-norm model that trains on a laptop CPU in minutes."""

    family: Family = Family.gpt
    dropout: float = 0.0
    lm_head_bias: bool = False
    logit_softcap: float | None = None  # final logits -> cap * tanh(logits / cap) (Gemma 2); None: off

    def check(self) -> None:
        super().check()
        positive("model.logit_softcap", self.logit_softcap, allow_none=True)

    causal_stack: ClassVar[bool] = True

    trains: ClassVar[dict[str, tuple[str, ...]]] = {
        TaskName.causal_lm: (
            DataKind.text,
            DataKind.tokens,
            DataKind.copy,
            DataKind.passkey,
            DataKind.recall,
            DataKind.addition,
            DataKind.repeated_segments,
        )
    }


@MODELS.register
@dataclass
class BertConfig(TokenModelConfig, ClassifierConfig):
    """Encoder-only, BERT-like: a masked-LM head and/or a pooled classifier."""

    trains: ClassVar[dict[str, tuple[str, ...]]] = {
        TaskName.mlm: (DataKind.text,),
        TaskName.classification: (DataKind.listops, DataKind.text_classification),
    }

    family: Family = Family.bert
    max_seq_len: int = 512
    type_vocab_size: int = 0  # >0 adds segment embeddings (BERT's token types)
    mlm_head: bool = True  # build the masked-LM head (attnlab-train builds it only for task=mlm)

    def check(self) -> None:
        super().check()
        not_negative("model.type_vocab_size", self.type_vocab_size)


@MODELS.register
@dataclass
class Seq2SeqConfig(TokenModelConfig):
    """Encoder-decoder: the original Transformer's small sibling, with scaled, shared embeddings."""

    trains: ClassVar[dict[str, tuple[str, ...]]] = {
        TaskName.seq2seq: (
            DataKind.dates,
            DataKind.numbers,
            DataKind.reverse,
            DataKind.pairs,
            DataKind.copy,
            DataKind.passkey,
            DataKind.recall,
            DataKind.addition,
        )
    }

    family: Family = Family.seq2seq
    n_layers: int = 3
    n_decoder_layers: int | None = 3  # None: same as n_layers
    activation: Activation = Activation.relu
    embed_scale: Any = True  # the original Transformer's, whatever the positional encoding
    share_embeddings: bool = True  # one table for source and target
    lm_head_bias: bool = False
    tied_output_scale: bool = False  # T5: hidden * d_model**-0.5 before a tied output projection

    default_pos: ClassVar[type[PosConfig]] = SinusoidalPos
    holds_mixers: ClassVar[bool] = False  # a decoder layer's cache pairs with cross-attention's

    def check(self) -> None:
        super().check()
        positive("model.n_decoder_layers", self.n_decoder_layers, allow_none=True)

    def attention_modules(self) -> int:
        """The encoder's self-attention, and each decoder layer's self- and cross-attention."""
        return self.n_layers + 2 * (self.n_decoder_layers or self.n_layers)


@MODELS.register
@dataclass
class ViTConfig(ClassifierConfig):
    """Vision Transformer: a small model for the 8x8 grey digits that scikit-learn ships."""

    trains: ClassVar[dict[str, tuple[str, ...]]] = {
        TaskName.classification: (DataKind.digits, DataKind.images)
    }

    family: Family = Family.vit
    d_model: int = 64
    image_size: int = 8
    patch_size: int = 2
    channels: int = 0  # 0: from the data (1 when every training image is grey, else 3)

    def check(self) -> None:
        super().check()
        for name in ("image_size", "patch_size"):
            positive(f"model.{name}", getattr(self, name))
        if self.channels not in (0, 1, 3):
            raise ConfigError(
                "model.channels", self.channels, "choose 1 (grey), 3 (RGB) or 0 (from the data)"
            )
        check_patches(self.image_size, self.patch_size)
        tokens = (self.image_size // self.patch_size) ** 2 + int(self.pooling == Pooling.cls)
        if self.attn_window is not None and self.attn_window >= tokens:
            raise ConfigError(
                "model.attn_window",
                self.attn_window,
                f"a window this wide covers all {tokens} tokens of an image and changes nothing; "
                f"choose at most {tokens - 1}, or null",
            )


def model_config(family: str, **settings: Any) -> ModelConfig:
    """The model config of ``family`` with ``settings`` (its other fields at the family's defaults)."""
    return MODELS.schema_of({"family": family})(**settings)


def check_heads(d_model: int, n_heads: int, n_kv_heads: int | None = None) -> None:
    """Heads split the width evenly; key/value heads are shared by equal groups of query heads."""
    if d_model % n_heads:
        raise ConfigError("model.d_model", d_model, f"must be divisible by model.n_heads={n_heads}")
    if n_kv_heads and n_heads % n_kv_heads:
        raise ConfigError("model.n_kv_heads", n_kv_heads, f"must divide model.n_heads={n_heads}")


def check_patches(image_size: int, patch_size: int) -> None:
    """A ViT cuts its images into whole patches."""
    if image_size % patch_size:
        raise ConfigError(
            "model.image_size", image_size, f"must be divisible into patches of model.patch_size={patch_size}"
        )
