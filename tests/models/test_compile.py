"""torch.compile on the models: no host sync, so no graph break, in the training forward of
any positional encoding, and no recompile when a compiled model alternates training and validation.

Out-of-range token ids and positions are still refused: with a one-line ``ValueError`` naming the
value in eager mode on the CPU, and inside the graph (``torch._assert_async``) when compiled.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch._dynamo.utils import counters

from attnlab.schema.pos import PosName

VOCAB, LEN = 32, 16


@pytest.fixture
def tiny(tiny_model: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """``tiny(pos, dropout=0.0)``: a one-layer GPT in training mode, LEN positions long."""

    def build(pos: str, dropout: float = 0.0, **switches: object) -> nn.Module:
        model = tiny_model(
            "gpt",
            pos,
            vocab_size=VOCAB,
            d_model=32,
            n_layers=1,
            max_seq_len=LEN,
            dropout=dropout,
            init_std=0.02,
            **switches,
        )
        return model.train()

    return build


def ids(batch: int = 2) -> Tensor:
    return torch.randint(0, VOCAB, (batch, LEN), generator=torch.Generator().manual_seed(0))


def training_loss(model: nn.Module, x: Tensor) -> Tensor:
    return F.cross_entropy(model(x).flatten(0, 1), x.flatten())


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("pos", list(PosName))
def test_training_forward_has_no_graph_break(tiny: Callable[..., nn.Module], pos: str) -> None:
    explained = torch._dynamo.explain(training_loss)(tiny(pos), ids())
    assert explained.graph_break_count == 0, [str(r.reason).splitlines()[0] for r in explained.break_reasons]
    assert explained.graph_count == 1


@pytest.mark.parametrize("pos", ["rope", "relative"])
def test_window_and_qk_norm_add_no_graph_break(tiny: Callable[..., nn.Module], pos: str) -> None:
    explained = torch._dynamo.explain(training_loss)(tiny(pos, attn_window=4, qk_norm=True), ids())
    assert explained.graph_break_count == 0, [str(r.reason).splitlines()[0] for r in explained.break_reasons]
    assert explained.graph_count == 1


@pytest.mark.parametrize("pos", ["learned", "alibi", "rope"])
def test_training_and_validation_alternate_without_recompiling(
    tiny: Callable[..., nn.Module], pos: str
) -> None:
    """Training (grad) and validation (eval, no grad) each compile once; alternating them after
    that compiles nothing: the only guard that differs between them is the grad mode."""
    model, x = tiny(pos, dropout=0.1), ids()
    model.compile(backend="eager")
    for _ in range(3):
        model.train()
        training_loss(model, x).backward()
        model.eval()
        with torch.no_grad():
            model(x)
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])


def test_bad_ids_and_positions_are_named_in_eager_mode(tiny: Callable[..., nn.Module]) -> None:
    model = tiny("learned").eval()
    with pytest.raises(ValueError, match=rf"^token id {VOCAB} is outside the model's vocabulary of {VOCAB} "):
        model(torch.full((1, 3), VOCAB))
    with pytest.raises(ValueError, match=rf"^position {LEN} is beyond the learned positional table "):
        model(torch.zeros(1, 3, dtype=torch.long), positions=torch.tensor([LEN - 2, LEN - 1, LEN]))
    # one token, as in a decoding step (read as one value, not reduced): the same errors
    with pytest.raises(ValueError, match=r"^token id -1 is outside the model's vocabulary "):
        model(torch.full((1, 1), -1))
    with pytest.raises(ValueError, match=rf"^position {LEN} is beyond the learned positional table "):
        model(torch.zeros(1, 1, dtype=torch.long), positions=torch.tensor([LEN]))


def test_bad_ids_are_refused_inside_a_compiled_graph(tiny: Callable[..., nn.Module]) -> None:
    model = tiny("learned").eval()
    model.compile(backend="eager")
    with torch.no_grad():
        assert model(ids()).shape == (2, LEN, VOCAB)
        with pytest.raises(RuntimeError, match="outside the model's vocabulary"):
            model(ids().clamp(max=0) + VOCAB)


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_runs_the_compiled_model_eagerly(tiny: Callable[..., nn.Module], use_cache: bool) -> None:
    """A KV cache (or a growing prompt) changes the shapes every step: decoding a compiled model
    compiles nothing, and gives the eager model's tokens."""
    from attnlab.generate import generate

    model = tiny("rope")
    expected = generate(model, ids(), max_new_tokens=6, temperature=0, use_cache=use_cache)
    model.compile(backend="eager")
    assert generate(model, ids(), max_new_tokens=6, temperature=0, use_cache=use_cache) == expected
    assert counters["stats"]["unique_graphs"] == 0, dict(counters["stats"])
