"""The μP ablation (experiments/mup/ablation.py): each arm changes the one piece of μP it names and
leaves the rest as μP made it, and its table compares each arm's best with sp's paired by seed, also
when the runs come from several lanes."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "mup"))
from ablation import PIECES, arm_rates, build_arm, cumulative_arms, lm_head, main

from attnlab.blocks import MultiHeadAttention
from attnlab.models.parametrization import hidden_matrices

WIDTH, LR = 64, 0.01  # m = 4 against the base width 16


def built(arm: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    return build_arm(arm, WIDTH, vocab=40, lr=LR)


def rates(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[float]:
    """Each parameter's rate, in the model's order."""
    rate = {id(param): group["lr"] for group in optimizer.param_groups for param in group["params"]}
    return [rate[id(param)] for param in model.parameters()]


def attention_scales(model: torch.nn.Module) -> list[float]:
    return [module.scale for module in model.modules() if isinstance(module, MultiHeadAttention)]


def test_the_hidden_rate_arm_trains_every_group_at_the_rate_mup_gives_the_embeddings() -> None:
    _, mup = built("mup")
    assert sorted({g["lr"] for g in mup.param_groups}) == [LR / 4, LR]
    _, arm = built("mup, hidden rate lr")
    assert {g["lr"] for g in arm.param_groups} == {LR}


def test_the_hidden_init_arm_initialises_the_hidden_matrices_as_sp_does() -> None:
    sp, _ = built("sp")
    arm, _ = built("mup, hidden init sp")
    mup, _ = built("mup")
    for sp_weight, arm_weight, mup_weight in zip(
        hidden_matrices(sp), hidden_matrices(arm), hidden_matrices(mup)
    ):
        nonzero = mup_weight != 0  # μP's zero-initialised queries stay zero
        assert torch.allclose(arm_weight[nonzero], sp_weight[nonzero])
        assert torch.allclose(mup_weight[nonzero], sp_weight[nonzero] / 2)
    assert lm_head(arm).scale == pytest.approx(1 / 4)


@pytest.mark.parametrize(
    "arm, scale", [("mup", 1 / 4), ("mup, logits not 1/m", 1.0), ("mup, logits x2", 2 / 4)]
)
def test_the_logit_arms_set_the_readout_multiplier(arm: str, scale: float) -> None:
    model, optimizer = built(arm)
    assert lm_head(model).scale == pytest.approx(scale)
    assert sorted({g["lr"] for g in optimizer.param_groups}) == [LR / 4, LR]  # the rates stay μP's


def test_the_attention_arm_multiplies_every_layer_s_score_scale() -> None:
    mup, _ = built("mup")
    arm, _ = built("mup, attention x0.5")
    scales = [attention_scales(model) for model in (mup, arm)]
    assert len(scales[0]) == 2 and scales[1] == pytest.approx([s / 2 for s in scales[0]])
    assert lm_head(arm).scale == pytest.approx(1 / 4)


@pytest.mark.parametrize("kept", ["hidden init", "logits"])
def test_sp_with_one_piece_of_mup_is_sp_but_for_that_piece(kept: str) -> None:
    sp, sp_optimizer = built("sp")
    arm, optimizer = built(f"sp + mup's {kept}")
    assert {g["lr"] for g in optimizer.param_groups} == {g["lr"] for g in sp_optimizer.param_groups} == {LR}
    assert attention_scales(arm) == pytest.approx(attention_scales(sp))  # sp's 1/sqrt(d_head)
    hidden = {id(w) for w in hidden_matrices(arm)}
    for (name, weight), sp_weight in zip(arm.named_parameters(), sp.parameters()):
        shrink = 0.5 if kept == "hidden init" and id(weight) in hidden else 1.0  # m^-1/2 with m = 4
        assert torch.allclose(weight, sp_weight * shrink), name  # the queries and readout not zeroed
    assert lm_head(arm).scale == pytest.approx(1 / 4 if kept == "logits" else 1.0)


def test_mup_with_every_piece_replaced_cumulatively_is_sp() -> None:
    arms = cumulative_arms(["logits", "attn scale"])
    assert arms == ["mup, sp's logits", "mup, sp's logits, attn scale"]
    everything = cumulative_arms(list(PIECES))[-1]
    sp, sp_optimizer = built("sp")
    arm, optimizer = built(everything)
    assert rates(arm, optimizer) == rates(sp, sp_optimizer) == [LR] * len(rates(sp, sp_optimizer))
    assert attention_scales(arm) == pytest.approx(attention_scales(sp))
    assert lm_head(arm).scale == pytest.approx(lm_head(sp).scale)
    for (name, weight), sp_weight in zip(arm.named_parameters(), sp.parameters()):
        assert torch.allclose(weight, sp_weight), name
    one, _ = built(arms[0])
    assert lm_head(one).scale == pytest.approx(1.0) and attention_scales(one) != pytest.approx(
        attention_scales(sp)
    )


def test_each_multiplier_given_is_an_arm_at_mup_s_rates() -> None:
    arms = arm_rates(["sp"], [0.5, 2.0], [4.0])
    assert list(arms) == ["sp", "mup, logits x0.5", "mup, logits x2", "mup, attention x4"]
    assert arms["mup, attention x4"] == arms["mup, logits x2"] == [7, 6, 5]
    assert list(arm_rates([], [], [0.25])) == ["mup, attention x0.25"]


def test_the_table_compares_each_arm_with_sp_paired_by_seed_across_merged_lanes(tmp_path) -> None:
    data = tmp_path / "text.txt"
    data.write_text("To be, or not to be, that is the question.\n" * 60, encoding="utf-8")
    common = ["--data", str(data), "--steps", "2", "--width", "32", "--rates", "7", "6"]
    for seed in ("0", "1"):
        lane = [
            "--seeds",
            seed,
            "--arms",
            "sp",
            "mup",
            "--output-multipliers",
            "2",
            "--out",
            str(tmp_path / seed),
        ]
        assert main([*common, *lane]) == 0
    lanes = [str(tmp_path / seed / "ablation.csv") for seed in ("0", "1")]
    assert main(["--merge", *lanes, "--steps", "2", "--out", str(tmp_path / "merged")]) == 0
    runs = pd.read_csv(tmp_path / "merged" / "ablation.csv")
    assert len(runs) == 2 * 3 * 2 and runs["wall_seconds"].notna().all()
    rows = {
        line.split(" | ")[0][2:]: line.split(" | ")
        for line in (tmp_path / "merged" / "ablation.md").read_text().splitlines()
        if line.startswith("| ") and "2^" in line
    }
    assert set(rows) == {"sp", "mup", "mup, logits x2"}
    mean = runs.groupby(["arm", "lr"])["held_out_loss"].mean()
    sp_best, mup_best = mean["sp"].min(), mean["mup"].min()
    assert float(rows["mup"][5]) == pytest.approx(mup_best - sp_best, abs=5e-4)
    assert rows["sp"][5] == "+0.000" and math.isfinite(float(rows["mup"][7].rstrip(" |")))


def test_a_merge_of_two_widths_or_of_a_missing_file_stops_with_one_line(tmp_path, capsys) -> None:
    assert main(["--merge", str(tmp_path / "none.csv"), "--out", str(tmp_path / "out")]) == 2
    pd.DataFrame({"arm": ["sp", "sp"], "width": [16, 128], "seed": [0, 0], "lr": [0.01, 0.01]}).to_csv(
        tmp_path / "two.csv", index=False
    )
    assert main(["--merge", str(tmp_path / "two.csv"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "none.csv" in err[0] and "16, 128" in err[1]
    assert not (tmp_path / "out").exists()
