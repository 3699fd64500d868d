"""The studies' own scripts compute their reference points and summaries right (on small inputs
whose answers are known by hand)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest
import torch

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def script(relative: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(Path(relative).stem, EXPERIMENTS / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


references = script("families/references.py")


def windows(*rows: list[int]) -> list[dict[str, torch.Tensor]]:
    return [{"input_ids": torch.tensor(r), "labels": torch.tensor(r)} for r in rows]


def test_the_unigram_reference_is_the_training_entropy_and_an_add_one_cross_entropy() -> None:
    splits = {
        "train": windows([0, 0, 1, 1], [-100, 0, 1, -100]),
        "val": windows([0, 1]),
        "test": windows([2, 2]),
    }
    out = references.unigram(splits)
    assert out["train_unigram_entropy"] == pytest.approx(math.log(2))  # padding (-100) left out
    assert out["val_unigram_cross_entropy"] == pytest.approx(-math.log(4 / 9))  # (3 + 1) / (6 + 3 tokens)
    assert out["test_unigram_cross_entropy"] == pytest.approx(-math.log(1 / 9))  # unseen in training


def test_the_classifier_reference_answers_the_training_majority_on_every_split() -> None:
    labelled = lambda *ys: [{"labels": y} for y in ys]  # noqa: E731
    splits = {"train": labelled(3, 3, 1), "val": labelled(3, 1, 1, 1), "test": labelled(3, 3)}
    out = references.reference(splits)
    assert (out["majority_label"], out["classes"], out["chance_acc"]) == (3, 2, 0.5)
    assert (out["val_majority_acc"], out["test_majority_acc"]) == (0.25, 1.0)


def test_the_translation_reference_copies_the_source() -> None:
    pair = lambda s, t: {"src": torch.tensor(s), "tgt": torch.tensor(t)}  # noqa: E731
    splits = {
        "train": [pair([1], [2])],
        "val": [pair([1, 2], [1, 2]), pair([1], [2])],
        "test": [pair([5], [6])],
    }
    assert references.reference(splits) == {"val_copy_exact_match": 0.5, "test_copy_exact_match": 0.0}


def test_the_baby_summary_gives_mean_and_sample_standard_deviation() -> None:
    summary = script("nanogpt_baby/summary.py")
    assert summary.mean_std([1.0, 2.0, 3.0]) == "2.0000 ± 1.0000"


def test_the_length_comparisons_read_an_arm_by_seed_its_scaling_and_its_length() -> None:
    import pandas as pd

    compare = script("length_generalisation/compare.py")
    frame = pd.DataFrame(
        {
            "data.kind": ["passkey"] * 4,
            "model.pos.name": ["rope", "rope", "none", "none"],
            "seed": [1, 2, 1, 2],
            "val/exact_match/len16": [0.5, 0.25, 0.125, 0.0],
            "val/exact_match/len32": [0.25, 0.0, 0.0, 0.0],
            "val/exact_match/len32/yarn": [0.5, 0.125, None, None],
            "val/answer_loss/len32": [2.5, 3.0, 4.0, 5.0],
        }
    )
    assert compare.per_seed(frame, "passkey", 32, "rope") == {1: 0.25, 2: 0.0}
    assert compare.per_seed(frame, "passkey", 32, "rope+yarn") == {1: 0.5, 2: 0.125}
    assert compare.per_seed(frame, "passkey", 32, "none@16") == {1: 0.125, 2: 0.0}  # another length
    assert compare.per_seed(frame, "passkey", 32, "none", "answer_loss") == {1: 4.0, 2: 5.0}  # another metric
    with pytest.raises(SystemExit):  # an arm no run evaluated stops the script
        compare.per_seed(frame, "passkey", 32, "none+yarn")


def test_the_induction_summary_finds_the_steepest_drop_and_a_step() -> None:
    derived = script("induction_heads/derived.py")
    seed = {
        "curve": [{"step": s, "repeat_loss": x} for s, x in [(0, 3.0), (50, 2.9), (100, 1.0), (150, 0.5)]]
    }
    assert derived.steepest(seed) == (100, 2.9, 1.0)
    assert derived.at_step(seed, 150, "repeat_loss") == 0.5


def test_the_induction_derivations_of_a_controlled_run() -> None:
    derived = script("induction_heads/derived.py")
    uniform = 4.0  # 3/4 of it: 3.0; 1/4 of it: 1.0
    seed = {
        "uniform_loss": uniform,
        "curve": [
            {"step": s, "repeat_loss": x} for s, x in [(0, 3.9), (10, 3.2), (20, 2.0), (30, 0.9), (40, 0.5)]
        ],
    }
    assert derived.transition(seed) == (10, 30)  # last above 3.0, first after it below 1.0
    assert derived.at_least(2, [0.5, 0.5]) == pytest.approx(0.25)
    assert derived.at_least(1, [0.5, 0.5]) == pytest.approx(0.75)
    assert derived.at_least(1, [0.1, 0.2, 0.0]) == pytest.approx(1 - 0.9 * 0.8)
    assert derived.block_mean([[1.0, 2.0], [3.0, 4.0]], [1], [0, 1]) == 3.5
    assert math.isnan(derived.block_mean([[1.0]], [], [0]))


def test_the_induction_summary_tables_the_controls_and_the_k_partners() -> None:
    summarize = script("induction_heads/summarize.py")
    chosen = {"chosen": 2.0, "controls": [1.0, 1.5], "rank": 1, "p": 1 / 3}
    seed = {
        "seed": 4,
        "random_controls": {
            "top_half_by_induction_score": {
                "heads": [[1, 0], [1, 1]],
                "kind": "overlapping",
                "sets": [[[1, 2], [1, 3]], [[1, 0], [1, 2]]],
                "zero": chosen,
                "mean": {**chosen, "controls": [], "rank": 1, "p": 1.0},
            }
        },
        "previous_token_scores": [[0.1, 0.2, 0.7, 0.4]],
        "previous_token_heads": [[0, 2], [0, 3]],
        "k_composition": {
            "partners": {
                "offset_0": {"L1H0": {"layer_0_head": 2, "is_previous_token_head": True}},
                "mean_over_offsets": {"L1H0": {"layer_0_head": 1, "is_previous_token_head": False}},
            }
        },
    }
    row = summarize.controls_table([seed]).splitlines()[2]
    assert row == (
        "| 4 | top half by induction score | L1H0 L1H1 | overlapping | 2 | 2.000 -> 1.250 [1.000, 1.500] | "
        "1, 0.333 | 2.000 -> none | 1, 1.000 |"
    )
    partners = summarize.partners_table([seed]).splitlines()[2]
    assert partners == "| 4 | L0H2 (0.700) L0H3 (0.400) | L1H0: L0H2; L0H1 | 1 of 1; 0 of 1 |"


def scaling_frame(losses: dict[tuple[float, int], list[float]]) -> pd.DataFrame:
    """Runs of the scaling study's results/runs.csv: a row per seed of each (budget, width)."""
    return pd.DataFrame(
        [
            {"trainer.compute_budget": budget, "model.d_model": width, "seed": seed, "val/loss final": loss}
            for (budget, width), seeds in losses.items()
            for seed, loss in zip((1337, 2, 3), seeds)
        ]
    )


def test_the_scaling_second_phase_takes_the_lowest_loss_width_and_its_better_neighbour() -> None:
    nearest = script("scaling/nearest.py")
    losses = {8: 2.25, 16: 2.3, 12: 2.4, 24: 2.2, 32: 2.35}  # 8 is second lowest, but no neighbour of 24
    frame = scaling_frame({(5e10, w): [loss] for w, loss in losses.items()})
    assert nearest.nearest_widths(frame) == [16, 24]
    edge = scaling_frame({(5e10, w): [loss] for w, loss in {8: 2.1, 12: 2.4, 16: 2.3}.items()})
    assert nearest.nearest_widths(edge) == [8, 12]  # a minimum at the edge has one neighbour
    assert nearest.budget_name(5e10) == "5e10" and nearest.budget_name(1e11) == "1e11"


def test_the_scaling_seed_bootstrap_draws_one_of_each_points_seeds() -> None:
    seeds = script("scaling/seeds.py")
    frame = scaling_frame({(5e10, 8): [1.0, 2.0, 3.0], (5e10, 16): [5.0, 5.0, 5.0], (1e11, 8): [7.0]})
    draws = [seeds.seed_draws(frame, np.random.default_rng(i)) for i in range(40)]
    assert {d[(5e10, 8)] for d in draws} == {1.0, 2.0, 3.0}
    assert {d[(5e10, 16)] for d in draws} == {5.0} and {d[(1e11, 8)] for d in draws} == {7.0}
    # pooled over the points with several seeds: variances 1 and 0, two degrees of freedom each
    assert seeds.pooled_seed_sd(frame) == pytest.approx(math.sqrt(0.5))


def test_the_scaling_rate_check_names_the_best_rate_and_its_paired_gain_over_the_studys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXPERIMENTS / "scaling"))  # rate_check.py imports nearest.py
    check = script("scaling/rate_check.py")
    rows = [
        {check.BUDGET: budget, check.WIDTH: width, check.LR: 2.0**exp, check.SEED: seed, check.LOSS: loss}
        for budget, width, exp, losses in [
            (5e10, 8, -7, [2.0, 2.1, 2.2]),  # 2^-7 best by 0.1 at every seed
            (5e10, 8, -6, [2.1, 2.2, 2.3]),
            (5e10, 8, -5, [2.5, 2.5, 2.5]),
            (4e11, 24, -7, [1.9, 1.9, 1.9]),
            (4e11, 24, -6, [1.8, 1.7, 1.9]),  # the study's rate best
            (4e11, 24, -5, [2.0, 2.0, 2.0]),
        ]
        for seed, loss in zip((1337, 2, 3), losses)
    ]
    first, second = check.point_rows(pd.DataFrame(rows))
    assert first.startswith(
        "| 5e10 | 8 | 2.1000 ± 0.1000 | 2.2000 ± 0.1000 | 2.5000 ± 0.0000 | 2^-7 | -0.1000"
    )
    assert first.endswith("p 0 |")  # every seed moved by the same amount
    assert second.startswith("| 4e11 | 24 |") and second.endswith("| 2^-6 | the study's rate |")


def test_muon_is_measured_against_the_adamw_rate_best_on_seed_one_in_shares_of_its_wall_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXPERIMENTS / "muon"))  # tuned_adamw.py imports steps_to_loss.py
    tuned = script("muon/tuned_adamw.py")
    rows = [
        {"rate": "2e-3", "seed": 1, "final_val_loss": 1.70},
        {"rate": "4e-3", "seed": 1, "final_val_loss": 1.65},
        {"rate": "2e-3", "seed": 2, "final_val_loss": 1.50},  # lower, but not the seed the rate is chosen on
    ]
    assert tuned.tuned_rate(rows) == "4e-3"
    runs = {
        "adamw-lr4e-3-seed1": {"optim": "adamw", "steps_to_target": 1900.0, "final_step": 2000},
        "muon-seed1": {"optim": "muon", "steps_to_target": 500.0, "final_step": 2000},
        "muon-seed2": {"optim": "muon", "steps_to_target": None, "final_step": 2000},
    }
    assert tuned.shares({"runs": runs}, cost=1.5) == {1: 500 * 1.5 / 2000, 2: math.inf}
