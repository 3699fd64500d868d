"""Composition scores read from the weights (Elhage et al. 2021) give their known answers on a hand-built
two-layer attention-only model: a layer-1 head whose keys read exactly the direction a layer-0 head
writes K-composes with it at 1 and with a head writing an orthogonal direction at 0; and the rotary QK
circuit at an offset is the score the rotated queries and keys give."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from attnlab.explain.composition import composition_score, composition_scores, qk_circuit
from attnlab.models import build_model
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import pos_config

D, HEADS = 8, 2
HEAD_DIM = D // HEADS


def basis(i: int) -> Tensor:
    return torch.eye(D)[i]


def test_the_score_is_one_for_a_reader_of_the_written_direction_and_zero_for_an_orthogonal_one() -> None:
    writer = torch.outer(basis(0), basis(5))  # reads e5, writes e0
    assert composition_score(torch.outer(basis(3), basis(0)), writer) == pytest.approx(1.0)
    assert composition_score(torch.outer(basis(3), basis(1)), writer) == pytest.approx(0.0)
    assert composition_score(7.0 * torch.outer(basis(3), basis(0)), 0.1 * writer) == pytest.approx(1.0)
    # the identity reads every direction, so it reads a rank-one writer's 1/sqrt(D) of its norm
    assert composition_score(torch.eye(D), writer) == pytest.approx(D**-0.5)


def head_rows(attn: nn.Module, head: int) -> tuple[Tensor, Tensor, Tensor]:
    w = attn.qkv_proj.weight
    return tuple(w[part * D + head * HEAD_DIM : part * D + (head + 1) * HEAD_DIM] for part in range(3))


def wired_model() -> nn.Module:
    """Layer 0: head h reads e(5+h) and writes e(h). Layer 1: head h's keys read e(h) and its queries e3
    (K-composition with layer-0 head h only); head 0's values read e1 (V-composition with head 1)."""
    cfg = GPTConfig(
        d_model=D,
        n_layers=2,
        n_heads=HEADS,
        max_seq_len=16,
        pos=pos_config("rope"),
        d_ff=0,
        vocab_size=4,
        bias=False,
    )
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for layer in model.stack.layers:
            layer.self_attn.norm.weight.fill_(1.0)
        first, second = (layer.self_attn.fn for layer in model.stack.layers)
        for h in range(HEADS):
            _, _, v = head_rows(first, h)
            v[0] = basis(5 + h)
            first.out_proj.weight[:, h * HEAD_DIM] = basis(h)
            q, k, _ = head_rows(second, h)
            q[0], k[0] = basis(3), basis(h)
        _, _, v = head_rows(second, 0)
        v[0] = basis(1)
        second.out_proj.weight[:, 0] = basis(7)
    return model


def test_k_composition_names_the_head_whose_output_the_keys_read() -> None:
    model = wired_model()
    torch.testing.assert_close(composition_scores(model, kind="k"), torch.eye(HEADS))
    torch.testing.assert_close(composition_scores(model, kind="q"), torch.zeros(HEADS, HEADS))
    torch.testing.assert_close(composition_scores(model, kind="v")[0], torch.tensor([0.0, 1.0]))


def test_a_norm_scale_on_the_read_direction_is_folded_in() -> None:
    model = wired_model()
    with torch.no_grad():
        q, k, _ = head_rows(model.stack.layers[1].self_attn.fn, 0)
        q[1], k[1] = basis(4), basis(2)  # layer 1's head 0 now also reads e2, which nothing writes
    assert composition_scores(model, kind="k")[0, 0] == pytest.approx(2**-0.5)
    with torch.no_grad():
        model.stack.layers[1].self_attn.norm.weight[2] = 0.0  # the norm before it removes e2
    assert composition_scores(model, kind="k")[0, 0] == pytest.approx(1.0)


def test_the_rotary_qk_circuit_at_an_offset_gives_the_rotated_score() -> None:
    torch.manual_seed(0)
    cfg = GPTConfig(
        d_model=D, n_layers=2, n_heads=HEADS, max_seq_len=16, pos=pos_config("rope"), d_ff=0, vocab_size=4
    )
    model = build_model(cfg).eval()
    attn = model.stack.layers[1].self_attn.fn
    gamma = model.stack.layers[1].self_attn.norm.weight.detach()
    x, y = torch.randn(D), torch.randn(D)
    q, k, _ = (w.detach() for w in head_rows(attn, 1))
    key_at, offset = 4, 3
    turned_q = attn.pos.apply_rotation((q @ (gamma * x))[None, None, None], torch.tensor([[key_at + offset]]))
    turned_k = attn.pos.apply_rotation((k @ (gamma * y))[None, None, None], torch.tensor([[key_at]]))
    expected = float((turned_q * turned_k).sum())
    assert float(x @ qk_circuit(model, 1, 1, offset) @ y) == pytest.approx(expected, rel=1e-4)
    assert float(x @ qk_circuit(model, 1, 1, offset) @ y) != pytest.approx(
        float(x @ qk_circuit(model, 1, 1) @ y)
    )


def test_the_writer_must_come_before_the_reader() -> None:
    with pytest.raises(ValueError, match="before the reader"):
        composition_scores(wired_model(), reader=0, writer=1)
