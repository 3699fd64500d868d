"""``trainer.compute_budget``: the steps a run takes come from the FLOPs it may spend, so a scaling
sweep's runs at one budget spend the same compute, and attnlab-report fits the laws from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from train_cli import TEXT, command_here, job_dirs, run_command

from attnlab.models.flops import steps_for_budget

pytestmark = pytest.mark.slow
QUICK = [
    "trainer.enable_progress_bar=false",
    "trainer.limit_val_batches=1",
    "trainer.val_every_n_steps=1000",
    "checkpoint.every_n_steps=1000",
    "data.batch_size=4",
    "model.n_layers=1",
    "model.n_heads=2",
    "logger=none",
]


def test_runs_of_one_budget_spend_it_whatever_their_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three widths at two budgets (the least sweep the fit takes): each run's steps x tokens a step
    x its FLOPs per token (summary.json, Chinchilla's count) is its budget, to within one step."""
    args = ["-m", "experiment=scaling", "data=text", *TEXT, "model.max_seq_len=32", *QUICK]
    sweep = ["trainer.compute_budget=2e8,6e8", "model.d_model=16,24,32"]
    result = command_here([*args, *sweep], tmp_path, monkeypatch, capsys)
    assert result.returncode == 0, result.stderr[-2000:]
    spent: dict[float, list[float]] = {}
    for job in job_dirs(tmp_path):
        config = yaml.safe_load((job / "config.yaml").read_text())
        summary = json.loads((job / "summary.json").read_text())
        budget, per_token = config["trainer"]["compute_budget"], summary["flops_per_token"]["chinchilla"]
        step_tokens = 4 * 32
        assert summary["final_step"] == config["trainer"]["max_steps"]  # the derived steps, recorded
        assert summary["final_step"] == steps_for_budget(budget, per_token, step_tokens)
        assert abs(summary["final_step"] * step_tokens * per_token - budget) <= per_token * step_tokens / 2
        spent.setdefault(budget, []).append(summary["final_step"])
    assert sorted(spent) == [2e8, 6e8]
    for steps in spent.values():
        assert steps == sorted(steps, reverse=True) and steps[0] > steps[-1]  # wider: fewer steps
    # attnlab-report in this process, with 5 bootstrap refits (as test_report_scaling.py: the intervals'
    # count, not their quality): a user's 100 took 12.9 CPU-s on these six runs, 5 take 1.1. The report
    # as a process of its own is test_report_sweep.py's.
    from attnlab.cli import report
    from attnlab.report import write

    monkeypatch.setattr(write, "SCALING_RESAMPLES", 5)
    sweep_dir = job_dirs(tmp_path)[0].parent
    assert run_command(report.main, [str(sweep_dir)], monkeypatch, capsys) == 0, capsys.readouterr().err
    text = (sweep_dir / "report.md").read_text()
    assert "## Scaling fit" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["model=bert", "trainer.compute_budget=1e9"],
            "trainer.compute_budget=1000000000.0: counts the FLOPs of a decoder",
        ),
        (["trainer.compute_budget=-1"], "trainer.compute_budget=-1"),
        (
            ["trainer.compute_budget=1e9", "trainer.devices=auto"],
            "trainer.devices=auto: trainer.compute_budget needs",
        ),
    ],
)
def test_a_budget_it_cannot_count_is_one_line(
    tmp_path: Path, args: list[str], message: str, monkeypatch, capsys
) -> None:
    result = command_here([*args, *TEXT, "run_dir=run"], tmp_path, monkeypatch, capsys)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "run").exists()
