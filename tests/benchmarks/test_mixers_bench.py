"""The mixers section at smoke-test sizes: its cache figures are exact counts, its ratios well formed."""

from __future__ import annotations

from benchmarks.common import Settings

from benchmarks import mixers


def test_mixers_section_counts_each_cache_and_times_each_mixer() -> None:
    rows = mixers.run(Settings(size="tiny", threads=1, memory=False))
    cache = {r.measure.split(", ", 1)[1]: r.median for r in rows if r.unit == "B"}
    assert cache["MHA (8 kv heads)"] == 2 * 8 * 64 * 2  # keys and values, bfloat16
    assert cache["GQA (2 kv heads)"] == 2 * 2 * 64 * 2
    assert cache["MLA (r 256 + rope 32)"] == (256 + 32) * 2  # the latent and the rotary key only
    state = 8 * 64 * 64 * 4 + (3 * 512) * 3 * 4  # the float32 state and the last 3 conv inputs
    assert cache["gated DeltaNet (8 x 64 x 64)"] == state / 8  # after 8 tokens
    ratios = [r for r in rows if r.unit == "×"]
    assert len(ratios) == 4 and all(0 < r.low <= r.median <= r.high for r in ratios)
