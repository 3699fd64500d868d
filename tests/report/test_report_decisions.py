"""The report's decisions from run directories: values at a matched budget (interpolated, never
extrapolated), the significance table against a baseline, and the time to a target."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from rundirs import config, val_losses, write_run
from test_report_tables import pos_seed_sweep

from attnlab.cli.report import main
from attnlab.report import read_sweep, write_report
from attnlab.report.compute import value_at, values_at_budget
from attnlab.report.decisions import Decisions

VAL_A = {10: 3.0, 20: 2.5, 30: 2.2}
VAL_B = {10: 2.9, 20: 2.4, 30: 2.1}


def budget_sweep(root: Path) -> Path:
    """Three runs of 30 steps at 100, 200 and 50 tokens a step: the budget of 2,500 tokens falls
    between steps 20 and 30 of A, between steps 10 and 20 of B, and beyond C's last step."""
    for job, (pos, val, tokens) in enumerate(
        [("learned", VAL_A, 3000), ("alibi", VAL_B, 6000), ("rope", VAL_A, 1500)]
    ):
        fields = {"train_tokens": tokens, "final_step": 30, "flops_per_token": {"chinchilla": 10.0}}
        write_run(root / str(job), config(model__pos__name=pos), val=val, summary_fields=fields)
    return root


def test_a_budget_reached_at_different_steps_is_interpolated_by_hand(tmp_path: Path) -> None:
    """A: 2,500 tokens is step 25, halfway from 2.5 to 2.2: 2.35. B: step 12.5, a quarter of the way
    from 2.9 to 2.4: 2.775. C trained on 1,500 tokens: NaN, not extrapolated."""
    sweep = read_sweep([budget_sweep(tmp_path)])
    values, _ = values_at_budget(sweep, sweep.runs.index, "val/loss", "tokens", 2500.0)
    assert values["0"] == pytest.approx(2.35)
    assert values["1"] == pytest.approx(2.775)
    assert math.isnan(values["2"])
    flops, _ = values_at_budget(sweep, sweep.runs.index, "val/loss", "flops", 25000.0)
    assert flops.iloc[:2].tolist() == pytest.approx([2.35, 2.775])  # 10 FLOPs a token


def test_the_budget_every_run_reached_is_the_least_of_their_last_points(tmp_path: Path) -> None:
    sweep = read_sweep([budget_sweep(tmp_path)])
    values, budget = values_at_budget(sweep, sweep.runs.index, "val/loss", "tokens", None)
    assert budget.auto and budget.value == 1500.0  # C's last validation
    # A at step 15; B at step 7.5, before its first validation (2,000 tokens): no value either
    assert values.tolist() == pytest.approx([2.75, math.nan, 2.2], nan_ok=True)
    assert math.isnan(value_at([2000.0, 4000.0], [2.9, 2.4], 1500.0))


def test_wall_time_is_a_budget_axis(tmp_path: Path) -> None:
    """write_run logs a validation at 0.1 s a step + 0.05 s: 2.05 s and 3.05 s are A's steps 20 and 30."""
    sweep = read_sweep([budget_sweep(tmp_path)])
    values, _ = values_at_budget(sweep, sweep.runs.index[:1], "val/loss", "time", 2.55)
    assert values.iloc[0] == pytest.approx(2.35)


def test_the_report_names_the_run_that_did_not_reach_the_budget(tmp_path: Path) -> None:
    sweep = budget_sweep(tmp_path)
    for job, seed in ((3, 2), (4, 2), (5, 2)):  # a second seed of each, so that seeds are swept
        pos, val, tokens = [("learned", VAL_A, 3000), ("alibi", VAL_B, 6000), ("rope", VAL_A, 1500)][job - 3]
        fields = {"train_tokens": tokens, "final_step": 30, "flops_per_token": {"chinchilla": 10.0}}
        write_run(sweep / str(job), config(model__pos__name=pos, seed=seed), val=val, summary_fields=fields)
    report = write_report(read_sweep([sweep]), sweep, decisions=Decisions(budget="tokens=2500"))
    text = report.markdown.read_text()
    assert "val/loss, at 2500 tokens, against model.pos.name=learned" in text
    assert "No value at the budget (left out): 2, 5." in text
    table = pd.read_csv(sweep / "significance.csv")
    alibi = table[table["configuration"] == "model.pos.name=alibi"].iloc[0]
    assert alibi["difference"] == pytest.approx(2.775 - 2.35, abs=1e-3)
    assert (sweep / "plots" / "val-loss_curves_by_time.png").is_file()


def test_significance_table_against_the_chosen_baseline(tmp_path: Path) -> None:
    sweep = pos_seed_sweep(tmp_path / "sweep")
    main([str(sweep), "--baseline", "alibi"])  # a value alone names the configuration that has it
    table = pd.read_csv(sweep / "significance.csv")
    assert table["configuration"].tolist() == ["model.pos.name=alibi", "model.pos.name=learned"]
    base, other = table.iloc[0], table.iloc[1]
    assert base["verdict"] == "baseline" and base["n"] == 3 and base["mean"] == pytest.approx(1.9)
    assert other["n"] == 3 and other["test"] == "paired t"
    # learned is 0.2 above alibi at every seed: no noise left, worse for a loss
    assert other["difference"] == pytest.approx(0.2) and other["p"] == 0
    assert other["verdict"] == "worse (higher val/loss)"
    text = (sweep / "report.md").read_text()
    assert "## Significance: val/loss, final value, against model.pos.name=alibi" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| model.pos.name=learned ")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    expected = ["model.pos.name=learned", "3", "2.1", "0.2", "[0.2, 0.2]", "paired t", "0", "0"]
    assert cells == [*expected, "worse (higher val/loss)", ""]


def test_an_unknown_baseline_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = pos_seed_sweep(tmp_path / "sweep")
    with pytest.raises(SystemExit) as exit_:
        main([str(sweep), "--baseline", "pos=rope"])  # the config key is model.pos.name
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        "error: --baseline=pos=rope: names no configuration; the configurations: "
        "model.pos.name=learned; model.pos.name=alibi\n"
    )


def test_time_to_target_is_tabulated_with_intervals(tmp_path: Path) -> None:
    for job, (seed, step) in enumerate([(1, 20), (2, 30), (3, None)]):
        target = {"metric": "val/loss", "value": 2.3, "mode": "min", "reached": step is not None}
        if step is not None:
            target.update(step=step, tokens=100 * step, flops=1000.0 * step, wall_time_s=0.1 * step)
        write_run(tmp_path / str(job), config(seed=seed), summary_fields={"target": target})
    report = write_report(read_sweep([tmp_path]), tmp_path)
    row = pd.read_csv(tmp_path / "time_to_target.csv").iloc[0]
    assert row["target"] == "val/loss <= 2.3" and (row["reached"], row["runs"]) == (2, 3)
    assert (row["steps mean"], row["steps low"], row["steps high"]) == (25.0, 20.0, 30.0)
    assert row["wall time (s) mean"] == pytest.approx(2.5)
    assert "| val/loss <= 2.3 | 2/3       | 25 [20, 30]" in report.markdown.read_text()
    assert json.loads((tmp_path / "2" / "summary.json").read_text())["target"]["reached"] is False


def test_without_seeds_the_named_baseline_is_still_the_bold_curve(tmp_path: Path) -> None:
    budget_sweep(tmp_path)  # one seed per configuration: nothing to test
    decisions = Decisions(baseline="alibi")
    report = write_report(read_sweep([tmp_path]), tmp_path, decisions=decisions)
    assert decisions.resolved_baseline == "model.pos.name=alibi"
    assert not any(title.startswith("Significance") for title in report.tables)
    assert not (tmp_path / "significance.csv").exists()


def test_the_significance_table_compares_sizes_within_the_baselines_compute_budget(tmp_path: Path) -> None:
    """A scaling sweep: the widths of the baseline's budget are compared with it, the other budget's
    configurations are left out (a small budget's model against a large one's says nothing), and
    report.md says how many."""
    job = 0
    for budget, steps in ((1e9, 30), (4e9, 120)):
        for width, final in ((16, 2.0), (32, 1.8)):
            for seed in (1, 2):
                cfg = config(
                    trainer__compute_budget=budget, trainer__max_steps=steps, model__d_model=width, seed=seed
                )
                write_run(tmp_path / "sweep" / str(job), cfg, val=val_losses(final + 0.01 * seed))
                job += 1
    main([str(tmp_path / "sweep")])
    table = pd.read_csv(tmp_path / "sweep" / "significance.csv")
    assert table["configuration"].tolist() == [
        "model.d_model=16, trainer.compute_budget=1000000000.0",
        "model.d_model=32, trainer.compute_budget=1000000000.0",
    ]
    assert table.iloc[1]["difference"] == pytest.approx(-0.2)
    text = (tmp_path / "sweep" / "report.md").read_text()
    assert "another trainer.compute_budget than the baseline (left out: 2 configurations)" in text
