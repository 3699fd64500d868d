"""Positional encodings: values against their papers' formulas, offset invariance, clear errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.blocks.positional import (
    ALiBiPositionalEncoding,
    LearnedPositionalEncoding,
    RelativePositionBias,
    RotaryPositionalEncoding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    build_positional,
    relative_position_bucket,
)
from attnlab.schema.pos import PosName, pos_config

ATOL = 1e-5


def test_sinusoidal_interleaved_matches_the_paper() -> None:
    """PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d))  (Vaswani et al. 2017)."""
    d = 8
    table = SinusoidalPositionalEncoding(d).table(torch.arange(50))
    for p in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=ATOL)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=ATOL)


def test_sinusoidal_concat_puts_sines_first() -> None:
    d = 8
    table = SinusoidalPositionalEncoding(d, layout="concat").table(torch.arange(50))
    for p in (0, 3, 49):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert table[p, i].item() == pytest.approx(math.sin(angle), abs=ATOL)
            assert table[p, d // 2 + i].item() == pytest.approx(math.cos(angle), abs=ATOL)


def test_sinusoidal_embed_adds_the_table_per_row() -> None:
    pe = SinusoidalPositionalEncoding(8)
    x = torch.randn(2, 4, 8)
    positions = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])
    out = pe.embed(x, positions)
    torch.testing.assert_close(out[0], x[0] + pe.table(torch.arange(4)), atol=ATOL, rtol=0)
    torch.testing.assert_close(out[1], x[1] + pe.table(torch.arange(5, 9)), atol=ATOL, rtol=0)
    torch.testing.assert_close(pe.embed(x, torch.arange(4)), x + pe.table(torch.arange(4)), atol=ATOL, rtol=0)


def test_sinusoidal_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"'spiral' is not a valid Layout"):
        SinusoidalPositionalEncoding(8, layout="spiral")
    with pytest.raises(
        ValueError, match=r"^model.pos.name=sinusoidal: sinusoidal needs an even model.d_model, got 7$"
    ):
        SinusoidalPositionalEncoding(7)


def test_learned_adds_its_table_and_refuses_positions_beyond_it() -> None:
    pe = LearnedPositionalEncoding(4, max_len=6)
    x = torch.zeros(1, 6, 4)
    torch.testing.assert_close(pe.embed(x, torch.arange(6)), pe.weight[None].detach())
    with pytest.raises(ValueError, match=r"position 6 is beyond.*max_seq_len=6"):
        pe.embed(torch.zeros(1, 7, 4), torch.arange(7))


def rope_reference(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Su et al.'s rotation in the half-split layout: pair (i, i + hd/2) turns by p * base^(-2i/hd)."""
    hd = x.shape[-1]
    out = torch.empty_like(x)
    for t, p in enumerate(positions.tolist()):
        for i in range(hd // 2):
            theta = p * base ** (-2 * i / hd)
            c, s = math.cos(theta), math.sin(theta)
            a, b = x[..., t, i], x[..., t, i + hd // 2]
            out[..., t, i] = a * c - b * s
            out[..., t, i + hd // 2] = a * s + b * c
    return out


def test_rope_matches_the_rotation_formula() -> None:
    pe = RotaryPositionalEncoding(8)
    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 1, 5, 8)
    positions = torch.tensor([0, 1, 4, 9, 30])
    rq, rk = pe.rotate(q, k, positions, positions)
    torch.testing.assert_close(rq, rope_reference(q, positions), atol=ATOL, rtol=0)
    torch.testing.assert_close(rk, rope_reference(k, positions), atol=ATOL, rtol=0)


@settings(max_examples=20, deadline=None)
@given(positions=st.lists(st.integers(0, 500), min_size=1, max_size=6))
def test_rope_preserves_norms(positions: list[int]) -> None:
    pe = RotaryPositionalEncoding(8)
    x = torch.randn(2, 3, len(positions), 8)
    rotated, _ = pe.rotate(x, x, torch.tensor(positions), torch.tensor(positions))
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-4, rtol=1e-5)


@settings(max_examples=20, deadline=None)
@given(shift=st.integers(1, 200), seed=st.integers(0, 2**16))
def test_rope_scores_depend_only_on_offsets(shift: int, seed: int) -> None:
    torch.manual_seed(seed)
    pe = RotaryPositionalEncoding(8)
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    positions = torch.tensor([0, 1, 2, 5, 9])

    def scores(p: torch.Tensor) -> torch.Tensor:
        rq, rk = pe.rotate(q, k, p, p)
        return rq @ rk.transpose(-1, -2)

    # fp32 angles of positions up to ~200 carry ~1e-5 relative error, hence 1e-4 here
    torch.testing.assert_close(scores(positions + shift), scores(positions), atol=1e-4, rtol=0)


def test_rope_module_survives_dtype_and_device_moves() -> None:
    """``model.double()`` goes through nn.Module._apply; the rotary module must not shadow it."""
    pe = RotaryPositionalEncoding(8).double()
    q = torch.randn(1, 1, 3, 8, dtype=torch.float64)
    rq, _ = pe.rotate(q, q, torch.arange(3), torch.arange(3))
    assert rq.dtype == torch.float64
    torch.testing.assert_close(rq, rope_reference(q, torch.arange(3)), atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_frequencies_survive_a_half_precision_model(dtype: torch.dtype) -> None:
    """``model.to(bfloat16)`` (Lightning's "bf16-true") must not round the frequencies themselves."""
    positions = torch.arange(0, 512, 7)
    sinusoidal, rope = SinusoidalPositionalEncoding(64), RotaryPositionalEncoding(64)
    table = sinusoidal.table(positions)
    q = torch.randn(1, 1, len(positions), 64)
    rotated, _ = rope.rotate(q, q, positions, positions)
    sinusoidal.to(dtype), rope.to(dtype)
    torch.testing.assert_close(sinusoidal.table(positions), table, atol=ATOL, rtol=0)
    torch.testing.assert_close(rope.rotate(q, q, positions, positions)[0], rotated, atol=ATOL, rtol=0)
    # in a half-precision model only the final rounding of the values remains
    half, _ = rope.rotate(q.to(dtype), q.to(dtype), positions, positions)
    torch.testing.assert_close(half.float(), rotated, atol=0.1, rtol=0.02)


def test_rope_errors_name_the_head_dimension() -> None:
    with pytest.raises(
        ValueError, match=r"^model.pos.name=rope: rope needs an even head size, d_model/n_heads=3$"
    ):
        build_positional(pos_config("rope"), d_model=12, n_heads=4, max_len=8, causal=True)


def test_alibi_slopes_follow_press_et_al() -> None:
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0**-i for i in range(1, 9)]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]))
    # 6 heads: the 4 slopes of 4 heads, then the odd-indexed slopes of 8 heads (2^-1, 2^-3)
    torch.testing.assert_close(
        alibi_slopes(6), torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3])
    )


def test_alibi_bias_is_minus_slope_times_distance() -> None:
    pe = ALiBiPositionalEncoding(4)
    positions = torch.arange(5)
    bias = pe.score_bias(positions, positions)
    assert bias.shape == (1, 4, 5, 5)
    for h, slope in enumerate(alibi_slopes(4).tolist()):
        for i in range(5):
            for j in range(5):
                assert bias[0, h, i, j].item() == pytest.approx(-slope * abs(i - j))


def test_t5_buckets_by_hand() -> None:
    """T5's bucket of a key-minus-query offset, computed by hand for num_buckets=32, max_distance=128.

    Bidirectional: 16 buckets a side, 8 exact; beyond, 8 + int(log(|d|/8) / log(128/8) * 8), at most 15,
    plus 16 for keys after the query. One-sided: 16 exact, then 16 + int(log(d/16) / log(8) * 16).
    """
    offsets = torch.tensor([0, 1, -1, -7, -8, -20, 20, -128, -1000, 1000])
    both = relative_position_bucket(offsets, bidirectional=True, num_buckets=32, max_distance=128)
    assert both.tolist() == [0, 17, 1, 7, 8, 10, 26, 15, 15, 31]
    offsets = torch.tensor([5, 0, -5, -15, -16, -40, -127, -200])
    one_sided = relative_position_bucket(offsets, bidirectional=False, num_buckets=32, max_distance=128)
    assert one_sided.tolist() == [0, 0, 5, 15, 16, 23, 31, 31]


def test_relative_bias_reads_the_table_at_the_bucket_of_each_offset() -> None:
    pe = RelativePositionBias(n_heads=2, num_buckets=8, max_distance=16, bidirectional=True)
    positions = torch.arange(6)
    bias = pe.score_bias(positions, positions)
    assert bias.shape == (1, 2, 6, 6)
    for i in range(6):
        for j in range(6):
            bucket = relative_position_bucket(torch.tensor(j - i), True, 8, 16)
            torch.testing.assert_close(bias[0, :, i, j], pe.bias.weight[bucket])


@settings(max_examples=20, deadline=None)
@given(
    name=st.sampled_from(["alibi", "relative"]),
    causal=st.booleans(),
    shift=st.integers(1, 1000),
    q_positions=st.lists(st.integers(0, 60), min_size=1, max_size=5),
)
def test_score_biases_depend_only_on_offsets(
    name: str, causal: bool, shift: int, q_positions: list[int]
) -> None:
    settings = dict(num_buckets=16, max_distance=32) if name == "relative" else {}
    pe = build_positional(pos_config(name, **settings), d_model=16, n_heads=4, max_len=8, causal=causal)
    q = torch.tensor(q_positions)
    k = torch.arange(0, 61, 3)
    torch.testing.assert_close(pe.score_bias(q + shift, k + shift), pe.score_bias(q, k), atol=0, rtol=0)
    # per-row positions (B, T) shift the same way, row by row
    rows_q, rows_k = torch.stack([q, q + 7]), torch.stack([k, k + 7])
    torch.testing.assert_close(pe.score_bias(rows_q, rows_k), pe.score_bias(q, k).expand(2, -1, -1, -1))


def test_score_biases_are_not_constant() -> None:
    """Guard against a vacuous offset test: a different offset gives a different bias."""
    for name in ("alibi", "relative"):
        pe = build_positional(pos_config(name), d_model=16, n_heads=4, max_len=8, causal=False)
        bias = pe.score_bias(torch.arange(4), torch.arange(4))
        assert not torch.allclose(bias[..., 0, 1], bias[..., 0, 3])


def test_hooks_of_the_other_kinds_are_identities() -> None:
    x, q, k = torch.randn(1, 3, 16), torch.randn(1, 4, 3, 4), torch.randn(1, 4, 3, 4)
    p = torch.arange(3)
    for name in PosName:
        pe = build_positional(pos_config(name), d_model=16, n_heads=4, max_len=8, causal=False)
        adds, rotates, biases = (
            name in ("sinusoidal", "learned"),
            name == "rope",
            name in ("alibi", "relative"),
        )
        assert torch.equal(pe.embed(x, p), x) != adds, name
        assert torch.equal(pe.rotate(q, k, p, p)[0], q) != rotates, name
        assert (pe.score_bias(p, p) is None) != biases, name


def test_every_kind_of_the_schema_is_built_and_nothing_else() -> None:
    """One encoding per PosName; something that is not a PosConfig is refused with a pointer."""
    built = {
        type(build_positional(pos_config(n), d_model=16, n_heads=4, max_len=8, causal=False)) for n in PosName
    }
    assert len(built) == len(PosName)
    with pytest.raises(TypeError, match=r"model.pos='xpos' is not a PosConfig"):
        build_positional("xpos", d_model=16, n_heads=4, max_len=8, causal=False)
