"""What every family shares: the interface its callers use, its stacks, positions, initialisation."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import torch
from torch import Tensor, nn

from attnlab.blocks.embedding import TokenEmbedding
from attnlab.blocks.layers import TransformerStack
from attnlab.blocks.masks import document_positions
from attnlab.blocks.positional import PositionalEncoding, build_positional
from attnlab.blocks.roles import ParamRole, parameter_roles, params_with_own_init
from attnlab.schema.builders import Builders
from attnlab.schema.model import MODELS, ModelConfig, TokenModelConfig
from attnlab.schema.pos import SinusoidalPos

# The model class of each family's config (``MODEL_CLASSES.of(cfg)``), registered by each class.
MODEL_CLASSES: Builders[type[FamilyModel]] = Builders(MODELS, "model class")


class FamilyModel(nn.Module):
    """What tasks, generation and explanations may ask of a model, so that none of them needs to
    know the families apart. Batches are dicts of tensors in the layout of the data modules.
    Each family's class registers as its config's builder: ``@MODEL_CLASSES.builds(GPTConfig)``."""

    input_kind: ClassVar[str] = "tokens"  # what an example is made of: "tokens" or "images"
    input_stack: ClassVar[str] = "stack"  # the stack that reads the input (its maps give attention rollout)
    cfg: ModelConfig

    @property
    def family(self) -> str:
        """The family's name, ``model.family``."""
        return self.cfg.family

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        """The family's output for a batch: per-position logits (B, T, V) or per-example logits (B, C)."""
        raise NotImplementedError

    def input_embedding(self) -> nn.Module:
        """The module whose output (B, T, D) is the input of the first layer (for gradient × input)."""
        raise NotImplementedError

    def batch_shape(self, batch: dict[str, Tensor]) -> tuple[int, int]:
        """(examples, positions each example runs through the input stack), from shapes alone."""
        need(batch, "input_ids")
        b, t = batch["input_ids"].shape
        return b, t

    def readout_positions(self, batch: dict[str, Tensor]) -> Tensor | None:
        """The position (B,) of each example whose output is its prediction; None where there is no one
        such position (pooling over positions, a whole target sequence, or a mask chosen by the caller)."""
        return None


def need(batch: dict[str, Tensor], *keys: str) -> None:
    """A ValueError naming the keys a batch lacks (instead of a KeyError deep in a forward pass)."""
    missing = [k for k in keys if k not in batch]
    if missing:
        raise ValueError(f"the batch lacks {', '.join(missing)} (it has {', '.join(sorted(batch))})")


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Run with dropout off, then restore the model's training flag."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def stack_of(
    cfg: ModelConfig, pos: PositionalEncoding, n_layers: int, first: int = 0, cross: bool = False
) -> TransformerStack:
    """The model's stack of ``n_layers`` layers (with cross-attention where ``cross``), applying ``pos``;
    its attention modules are the model's from the ``first``-th on (``model.kept_heads``)."""
    per_layer = 2 if cross else 1
    return TransformerStack(
        cfg,
        n_layers,
        pos,
        cross_attention=cross,
        final_norm=has_final_norm(cfg),
        kept_heads=stack_heads(cfg, first, per_layer * n_layers),
    )


def stack_heads(cfg: ModelConfig, first: int, count: int) -> list[list[int]] | None:
    """The kept heads (``model.kept_heads``) of the ``count`` attention modules from the ``first``-th
    of the model on: those of one stack; None when the model is not pruned."""
    return None if cfg.kept_heads is None else cfg.kept_heads[first : first + count]


def positional(cfg: ModelConfig, causal: bool, max_len: int) -> PositionalEncoding:
    """The positional encoding of ``cfg.pos`` for ``max_len`` positions; ``causal`` selects T5's
    one-sided buckets."""
    return build_positional(cfg.pos, d_model=cfg.d_model, n_heads=cfg.n_heads, max_len=max_len, causal=causal)


def scales_embeddings(cfg: TokenModelConfig) -> bool:
    """Whether token embeddings are multiplied by sqrt(d_model): ``model.embed_scale``, where "auto"
    means exactly for the additive fixed encoding (sinusoidal), as in the original Transformer.

    A fixed sinusoid has norm sqrt(d/2) per position, where N(0, 0.02) token embeddings have norm
    0.02 sqrt(d): summed, the positions would swamp the tokens before the first norm. Scaled tokens
    start at N(0, 1/d) (``init_weights``), so both parts have unit-order norms. Learned positions start
    as small as the tokens, and the other kinds add nothing to the embeddings, so "auto" leaves
    them unscaled (GPT-2, BERT and Llama do not scale).
    """
    if cfg.embed_scale == "auto":
        return isinstance(cfg.pos, SinusoidalPos)
    return bool(cfg.embed_scale)


def token_embedding(cfg: TokenModelConfig, causal: bool, type_vocab_size: int = 0) -> TokenEmbedding:
    """Token embeddings with the configured positional encoding, scale, norm and dropout."""
    return TokenEmbedding(
        cfg.vocab_size,
        cfg.d_model,
        positional(cfg, causal=causal, max_len=cfg.max_seq_len),
        type_vocab_size=type_vocab_size,
        scale=scales_embeddings(cfg),
        norm=cfg.norm if cfg.embed_norm else None,
        norm_eps=cfg.norm_eps,
        norm_bias=cfg.norm_bias,
        dropout=cfg.dropout,
    )


def has_final_norm(cfg: ModelConfig) -> bool:
    return cfg.norm_first if cfg.final_norm is None else cfg.final_norm


def default_positions(input_ids: Tensor, offset: int = 0) -> Tensor:
    """Absolute positions ``offset .. offset+T-1`` of a (B, T) batch."""
    return torch.arange(offset, offset + input_ids.shape[1], device=input_ids.device)


def token_positions(input_ids: Tensor, document_ids: Tensor | None, offset: int = 0) -> Tensor:
    """The positions of a (B, T) batch: ``offset .. offset+T-1``, or with ``document_ids`` (B, T) of
    packed documents, positions restarting at 0 in each document (``blocks.masks.document_positions``).

    Restarting matters for the encodings that add absolute positions (learned, sinusoidal): each
    document then looks as it would alone. RoPE, ALiBi and T5's relative bias see only distances, which
    the document mask keeps within a document either way.
    """
    if document_ids is None:
        return default_positions(input_ids, offset)
    if tuple(document_ids.shape) != tuple(input_ids.shape):
        raise ValueError(
            f"document_ids of shape {tuple(document_ids.shape)} do not match input_ids of shape "
            f"{tuple(input_ids.shape)}: one id per token"
        )
    return document_positions(document_ids)


# The roles whose weights start at N(0, init_std) (residual outputs at init_std / sqrt(2L)); vectors
# keep their modules' values (norm gains at one), but a matrix's bias starts at zero.
DRAWN_ROLES = (
    ParamRole.embedding,
    ParamRole.position_table,
    ParamRole.input_matrix,
    ParamRole.hidden_matrix,
    ParamRole.readout,
)
RESIDUAL_OUTPUTS = ("out_proj.weight", "fc_out.weight")  # the projections that write into the residual stream


def init_weights(model: nn.Module, std: float, n_layers: int) -> None:
    """GPT-2's initialisation, by role (``blocks.roles``): N(0, std) matrices and tables, zero biases,
    residual outputs scaled by 1/sqrt(2L); what a module initialised itself (a learned position table,
    the ViT class token) and the other vectors stay as built.

    Token tables that are multiplied by sqrt(d_model) start at N(0, 1/d_model) instead, as in the
    original Transformer, so scaled embeddings have unit variance and are not drowned by sinusoids.
    """
    roles, own = parameter_roles(model), params_with_own_init(model)
    gates = [
        m for name, m in model.named_modules() if isinstance(m, nn.Linear) and name.endswith("gate.proj")
    ]
    hook_weights = {id(gate.weight) for gate in gates}  # an attention hook's: drawn apart, below
    drawn = {name for name, role in roles.items() if role in DRAWN_ROLES and name not in own}
    for name, param in model.named_parameters():  # module by module, as the draws always came
        if id(param) in hook_weights:
            continue
        if name in drawn:
            residual = name.endswith(RESIDUAL_OUTPUTS)
            nn.init.normal_(param, std=std / math.sqrt(2 * n_layers) if residual else std)
        elif name.endswith("bias") and f"{name[: -len('bias')]}weight" in drawn:
            nn.init.zeros_(param)
    for module in model.modules():
        if isinstance(module, TokenEmbedding) and module.scale != 1.0:
            nn.init.normal_(module.tokens.weight, std=1.0 / module.scale)
    init_hook_weights(gates, std)


def init_hook_weights(linears: list[nn.Linear], std: float) -> None:
    """N(0, std) for the attention hooks' matrices (``blocks.hooks``), each from its own generator
    seeded from the process's seed, so that the global random state (every other weight, the data
    order, dropout) is what it would be without the hooks."""
    for i, linear in enumerate(linears):
        generator = torch.Generator(device="cpu").manual_seed(torch.initial_seed() + 7919 * (i + 1))
        values = torch.randn(linear.weight.shape, generator=generator) * std
        with torch.no_grad():
            linear.weight.copy_(values)


def init_tied_scaled_tokens(embed: TokenEmbedding, cfg: TokenModelConfig) -> None:
    """A token table that is multiplied by sqrt(d_model) and also the output projection starts at
    N(0, init_std), like every other table, rather than at N(0, 1/d_model) (``init_weights``).

    At N(0, 1/d_model) a token's scaled embedding is a unit-variance share of the residual stream, and
    the tied output projects the normalised stream back onto the same table: the token's own logit
    starts near sqrt(d_model) and the model predicts its input, at twice the uniform loss on the char
    corpus (8.9 against ln 103 = 4.6 at d 128), and learns slower than the other encodings (val/loss
    4.3 against 3.4 after 30 steps). From N(0, 0.02) the scaled tokens still have a third of
    the sinusoid's scale at d 128 (0.23 per dimension against 0.71), not a 35th as unscaled ones would,
    and the model starts at the uniform loss (4.68) and trains as fast as with the other encodings.
    Only the initial values change: trained checkpoints mean what they meant.
    """
    if cfg.tie_embeddings and scales_embeddings(cfg):
        nn.init.normal_(embed.tokens.weight, std=cfg.init_std)


def check_vocab(cfg: TokenModelConfig) -> None:
    if cfg.vocab_size <= 0:
        raise ValueError(
            f"model.vocab_size={cfg.vocab_size}: a text model needs a positive vocabulary size "
            "(it is filled in from the data's tokenizer by attnlab-train)"
        )
