"""The step-time commands of the muon and packing studies: what they print holds together (no timing
is asserted: the figures of a loaded test machine mean nothing)."""

from __future__ import annotations

import json

import pytest

from benchmarks import optimizer_step, packing_step


def test_optimizer_step_prints_each_median_and_its_ratio_to_adamw(capsys: pytest.CaptureFixture[str]) -> None:
    optimizer_step.main(["--repeats", "1"])
    found = json.loads(capsys.readouterr().out)
    medians, ratios = found["median_s_per_step"], found["ratio_to_adamw"]
    assert set(medians) == set(ratios) == {"adamw", "muon_float32", "muon_bfloat16"}
    assert ratios["adamw"] == 1.0 and all(s > 0 for s in medians.values())
    assert (found["threads"], found["repeats"]) == (1, 1)


def test_packing_step_counts_only_real_tokens_and_compares_with_the_masked_arm() -> None:
    found = packing_step.measure(rounds=packing_step.WARMUP + 2)
    assert set(found) == {"masked", "unmasked", "padded"}
    assert found["masked"]["real_share"] == found["unmasked"]["real_share"] == 1.0
    assert 0 < found["padded"]["real_share"] < 1.0  # padding positions are not real tokens
    assert found["masked"]["step_time_vs_masked"] == 1.0
    for arm in found.values():
        expected = packing_step.BATCH * packing_step.SEQ_LEN * arm["real_share"] / arm["s_per_step"]
        assert arm["real_tokens_per_s"] == pytest.approx(expected, rel=1e-3)
