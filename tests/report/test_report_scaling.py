"""attnlab-report fits scaling laws to a sweep whose runs carry parameters, tokens and FLOPs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rundirs import config, val_losses, write_run

from attnlab.report import read_sweep, write_report
from attnlab.report import write as report_write
from attnlab.report.scaling import Law, synthetic_runs

PNG = b"\x89PNG\r\n\x1a\n"
LAW = Law(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)  # Hoffmann et al. 2022, approach 3
PER_TOKEN = 6.0  # FLOPs per parameter per token, so that C = 6 N D as the synthetic runs have it


def scaling_sweep(root: Path) -> Path:
    """Run directories whose summary.json holds what training writes (n_params, train_tokens,
    flops_per_token) and whose final val/loss follows LAW."""
    runs = synthetic_runs(LAW, np.logspace(18, 20, 3), sizes_per_budget=5, noise=0.002, seed=3)
    for job, (n, d, loss) in enumerate(zip(runs.n, runs.d, runs.loss)):
        fields = {
            "train_tokens": d,
            "flops_per_token": {"nanogpt": PER_TOKEN * n, "chinchilla": PER_TOKEN * n},
        }
        write_run(root / str(job), config(seed=job), val=val_losses(float(loss)), n_params=int(n),
                  summary_fields=fields)  # fmt: skip
    return root


def test_a_sweep_with_parameters_tokens_and_flops_gets_the_fit_table_and_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_write, "SCALING_RESAMPLES", 5)  # the intervals' count, not their quality
    report = write_report(read_sweep([scaling_sweep(tmp_path / "sweep")]), tmp_path / "out")
    table = report.tables[report_write.SCALING_TITLE]
    values = dict(zip(table["estimate"], table["value"].astype(float)))
    assert values["alpha"] == pytest.approx(LAW.alpha, abs=0.05)
    assert values["a2"] == pytest.approx(LAW.beta / (LAW.alpha + LAW.beta), abs=0.05)
    minima = report.tables[report_write.PROFILES_TITLE]
    assert len(minima) == 3  # one row per budget
    n_opt = minima["N_opt"].str.replace(",", "").astype(float).to_numpy()
    assert np.all(np.diff(np.log(n_opt)) > 0)  # the optimal size grows with the budget
    names = {p.name for p in report.plots}
    assert {"isoflop.png", "loss_vs_flops.png", "law_fit.png", "optimal_allocation.png"} <= names
    for path in report.plots:
        assert path.read_bytes().startswith(PNG)
    text = report.markdown.read_text()
    assert report_write.SCALING_TITLE in text and "![isoflop](plots/isoflop.png)" in text


def test_a_sweep_without_tokens_and_flops_has_no_scaling_fit(tmp_path: Path) -> None:
    for job in range(8):
        write_run(tmp_path / "sweep" / str(job), config(seed=job), val=val_losses(2.0 + job / 10))
    report = write_report(read_sweep([tmp_path / "sweep"]), tmp_path / "out")
    assert report_write.SCALING_TITLE not in report.tables
    assert not {"isoflop.png", "loss_vs_flops.png"} & {p.name for p in report.plots}


def test_seeds_of_one_size_and_length_get_no_scaling_fit(tmp_path: Path) -> None:
    """Six runs that carry parameters, tokens and FLOPs but share N and D: nothing to fit a law to."""
    for job in range(6):
        write_run(
            tmp_path / str(job),
            config(seed=job),
            val=val_losses(2.0 + job / 100),
            test={"test/loss": 2.0},
            summary_fields={"train_tokens": 30 * 512, "flops_per_token": {"chinchilla": 1e6}},
        )
    report = write_report(read_sweep([tmp_path]), tmp_path / "out")
    assert report_write.SCALING_TITLE not in report.tables


def test_runs_that_differ_in_more_than_size_and_length_get_no_scaling_fit(tmp_path: Path) -> None:
    """The scaling sweep's runs with the positional encoding swept too (a comparison of encodings whose
    parameter counts differ by a position table): no law in N and D describes them."""
    runs = synthetic_runs(LAW, np.logspace(18, 20, 3), sizes_per_budget=5, noise=0.002, seed=3)
    for job, (n, d, loss) in enumerate(zip(runs.n, runs.d, runs.loss)):
        fields = {"train_tokens": d, "flops_per_token": {"chinchilla": PER_TOKEN * n}}
        pos = ("rope", "learned")[job % 2]
        write_run(tmp_path / str(job), config(seed=job, model__pos__name=pos), val=val_losses(float(loss)),
                  n_params=int(n), summary_fields=fields)  # fmt: skip
    report = write_report(read_sweep([tmp_path]), tmp_path / "out")
    assert report_write.SCALING_TITLE not in report.tables
    assert not {"isoflop.png", "loss_vs_flops.png"} & {p.name for p in report.plots}
