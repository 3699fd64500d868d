"""The induction study's own pipeline at a short length: a 2-layer attention-only decoder trained for
500 steps on repeated segments (about 12 CPU-seconds) passes the phase change, and the induction score,
activation patching and ablation name the same heads (``experiments/induction_heads/study.py``)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

STUDY = Path(__file__).parents[2] / "experiments" / "induction_heads" / "study.py"


def load_study() -> ModuleType:
    """study.py as a module (registered first: its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location("induction_study", STUDY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_short_training_forms_induction_heads_that_every_method_names() -> None:
    study = load_study()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = study.run(0, study.Size(steps=500, eval_every=100, eval_rows=64))
    finally:
        torch.set_num_threads(threads)

    assert result["phase_change_step"] is not None and result["phase_change_step"] <= 500
    assert result["final_repeat_loss"] < 0.5 < math.log(26)  # the repeat is copied, not guessed
    assert result["induction_heads"] and all(layer == 1 for layer, _ in result["induction_heads"])
    assert result["same_heads"]  # patching ranks the induction heads first
    assert result["previous_token_heads"]  # and layer 0 holds the heads they compose with
    for mode in ("zero", "mean"):
        ablation = result["ablation"][mode]
        induction = ablation["induction_heads"] - ablation["before"]
        assert induction > 2.0, mode
        if ablation["control_heads"] is not None:
            assert ablation["control_heads"] - ablation["before"] < induction / 2, mode


def test_the_control_sets_match_the_chosen_set_in_size_and_say_where_they_come_from() -> None:
    study = load_study()
    kind, sets = study.control_sets(8, [(1, 0), (1, 1)], count=10, seed=0)
    assert kind == "disjoint" and len(sets) == 10  # 15 pairs of the six other heads: enough
    assert all(len(s) == 2 and all(layer == 1 and h >= 2 for layer, h in s) for s in sets)
    assert len({tuple(map(tuple, s)) for s in sets}) == 10  # drawn without replacement

    kind, sets = study.control_sets(8, [(1, 0), (1, 1)], count=20, seed=0)  # 15 disjoint pairs: too few
    assert kind == "overlapping" and len(sets) == 20 and [(1, 0), (1, 1)] not in sets
    assert any((1, 0) in s for s in sets) and len({tuple(map(tuple, s)) for s in sets}) == 20

    kind, sets = study.control_sets(8, [(1, h) for h in range(7)], count=20, seed=0)  # 7 other sets in all
    assert kind == "overlapping" and len(sets) == 7 and all((1, 7) in s for s in sets)
    assert study.control_sets(8, [(1, h) for h in range(8)], count=20, seed=0) == ("none", [])
    assert study.control_sets(8, [(0, 1), (1, 1)], count=20, seed=0) == ("none", [])  # two layers


def test_the_top_half_and_the_rank_among_the_controls() -> None:
    study = load_study()
    scores = torch.tensor([[0.9, 0.0, 0.0, 0.0], [0.1, 0.7, 0.2, 0.8]])
    assert study.top_heads(scores, 1, 2) == [(1, 1), (1, 3)]
    assert study.rank_among(4.0, [0.5, 1.0, 2.0]) == (1, 0.25)
    assert study.rank_among(1.0, [0.5, 1.0, 2.0]) == (2, 0.75)  # a tie counts against the chosen set


def test_the_hand_built_circuit_ranks_first_among_its_controls_and_composes_with_its_previous_token_head() -> (
    None
):
    from test_induction_circuit import SEQ, VOCAB, induction_model, repeated_rows

    from attnlab.explain.induction import induction_scores, previous_token_scores

    study = load_study()
    model = induction_model()
    clean, _ = repeated_rows(64, seed=1)
    with torch.no_grad():
        scores, previous = induction_scores(model, clean), previous_token_scores(model, clean)
    heads = study.roles(scores, previous)
    assert heads["induction"] == [(1, 0)] and heads["previous_token"] == [(0, 0)]

    chosen = study.chosen_sets(scores, heads)
    assert chosen["top_half_by_induction_score"] == [(1, 0)]
    controls = study.random_controls(
        model, clean, [repeated_rows(64, seed=2)[0]], chosen, study.Size(n_heads=2, controls=1), 0
    )
    for name, distractor in (("induction_heads", [[1, 1]]), ("previous_token_heads", [[0, 1]])):
        assert controls[name]["kind"] == "disjoint" and controls[name]["sets"] == [distractor], name
        for mode in ("zero", "mean"):
            result = controls[name][mode]
            assert result["rank"] == 1 and result["p"] == 0.5, (name, mode)
            assert result["chosen"] > result["controls"][0] + 2.0, (name, mode)

    composition = study.k_composition(model, SEQ, heads)
    # the induction head's keys read all VOCAB token directions the previous-token head writes: a
    # full-rank identity composition scores 1 / sqrt(rank); the distractor writes where nothing reads
    assert composition["offset_0"][0] == pytest.approx([VOCAB**-0.5, 0.0], abs=1e-6)
    for partners in composition["partners"].values():
        assert partners == {"L1H0": {"layer_0_head": 0, "is_previous_token_head": True}}
