"""What attnlab-report writes: report.md, runs.csv and plots whose lines hold the right numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from rundirs import config, val_losses, write_eval, write_run
from test_report_tables import pos_seed_sweep

from attnlab.report import read_sweep, write_report
from attnlab.report.plots import learning_curve_plots, length_plots, plot_by_key

PNG = b"\x89PNG\r\n\x1a\n"


def with_length_evals(root: Path) -> Path:
    """Every completed job of ``pos_seed_sweep`` evaluated at 64 (its training length), 128 and 256;
    as attnlab-eval records only what it changed, the evaluation at 64 has no override."""
    for job in range(6):
        if (root / str(job) / "test_metrics.json").exists():
            for length in (64, 128, 256):
                loss = 2.0 + job * 0.01 + (length / 64 - 1) * (0.5 if job < 3 else 0.0)
                overrides = {} if length == 64 else {"data.seq_len": length}
                write_eval(root / str(job), f"e/{length}", {"val/loss": loss}, overrides=overrides)
    return root


def test_report_files(tmp_path: Path) -> None:
    sweep = read_sweep([with_length_evals(pos_seed_sweep(tmp_path / "sweep", failed_seed=2))])
    report = write_report(sweep, tmp_path / "out")
    assert [p.name for p in report.plots] == [
        "val-loss_by_model.pos.name.png",
        "val-loss_curves.png",
        "val-loss_curves_by_time.png",
        "val-loss_by_length.png",
    ]
    assert all(p.read_bytes().startswith(PNG) for p in report.plots)
    text = report.markdown.read_text()
    assert "6 runs: 5 completed, 1 failed." in text
    assert "Swept: model.pos.name, seed." in text
    for title in ("## Runs", "## Configurations (mean ± std over seeds)", "## Evaluations"):
        assert title in text
    assert "| ValueError: boom" in text
    assert "| alibi            |   2 | 2 completed, 1 failed |" in text
    for plot in report.plots:
        assert f"]({plot.relative_to(tmp_path / 'out').as_posix()})" in text
    rows = pd.read_csv(report.csv, index_col="job")
    runs = rows[rows["row"] == "training"]
    assert runs.shape[0] == 6
    assert runs.loc[4, "status"] == "failed"
    assert runs.loc[0, "val/loss best"] == 2.0
    evals = rows[rows["row"] == "evaluation"]  # 5 completed jobs x 3 lengths, each with its loss
    assert len(evals) == 15
    assert sorted(evals.loc[3, "eval data.seq_len"]) == [64, 128, 256]  # 64: the trained length
    assert evals.loc[3].set_index("eval data.seq_len").loc[256, "val/loss"] == pytest.approx(2.03)
    assert set(evals["model.pos.name"]) == {"learned", "alibi"}
    assert not list((tmp_path / "out").rglob("*.tmp"))


def test_runs_without_metrics_files_still_report(tmp_path: Path) -> None:
    """Runs made before metrics.jsonl and summary.json existed: config and test metrics only."""
    pos_seed_sweep(tmp_path)
    for job in tmp_path.iterdir():
        (job / "metrics.jsonl").unlink()
        (job / "summary.json").unlink()
    report = write_report(read_sweep([tmp_path]), tmp_path)
    assert report.tables["Runs"]["status"].tolist() == ["completed"] * 6
    assert report.tables["Configurations (mean ± std over seeds)"]["test/loss"].tolist() == [
        "2.15 ± 0.1",
        "1.95 ± 0.1",
    ]
    assert report.plots == []


def test_metric_by_key_plots_mean_and_std_at_each_value() -> None:
    ax = Figure().add_subplot()
    x = pd.Series(["rope", "alibi", "rope", "alibi", "rope"])
    y = pd.Series([1.0, 2.0, 3.0, 4.0, 5.0])
    plot_by_key(ax, x, y, pd.Series("all runs", index=x.index))
    (errorbar,) = ax.containers
    line = errorbar.lines[0]
    np.testing.assert_allclose(line.get_xdata(), [0, 1])  # alibi, rope
    np.testing.assert_allclose(line.get_ydata(), [3.0, 3.0])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["alibi", "rope"]
    assert ax.get_xlim() == (-0.5, 1.5)  # the outer names away from the frame
    assert line.get_linestyle() == "None"  # no line between categories
    bars = errorbar.lines[2][0].get_segments()  # the bars span mean ± std: rope 1, 3, 5; alibi 2, 4
    np.testing.assert_allclose([b[:, 1] for b in bars], [[3 - 2**0.5, 3 + 2**0.5], [1.0, 5.0]])


def test_numeric_keys_spanning_8x_get_a_log_axis() -> None:
    ax = Figure().add_subplot()
    x = pd.Series([1, 2, 4, 8])
    plot_by_key(ax, x, pd.Series([4.0, 3.0, 2.0, 1.0]), pd.Series("all runs", index=x.index))
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]


def test_learning_curves_average_the_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for seed, final in ((1, 2.0), (2, 2.2)):
        cfg = config(seed=seed)
        write_run(tmp_path / str(seed), cfg, val=val_losses(final, (10, 20)), test={"test/loss": 1})
    write_run(tmp_path / "3", config(seed=3), status="running", val={10: 9.0})  # in progress: shown too
    figures = capture_figures(monkeypatch)
    path, by_time = learning_curve_plots(read_sweep([tmp_path]), tmp_path / "plots")
    assert path.name == "val-loss_curves.png" and by_time.name == "val-loss_curves_by_time.png"
    ax = figures[0].axes[0]
    val, train, key = ax.lines  # the validation mean, the training loss in its colour, the legend's key
    np.testing.assert_allclose(val.get_xdata(), [10, 20])
    np.testing.assert_allclose(val.get_ydata(), [(2.25 + 2.45 + 9.0) / 3, 2.1])
    np.testing.assert_allclose(train.get_xdata(), [5, 10, 15, 20])  # every logged training step
    np.testing.assert_allclose(train.get_ydata(), [2.95, 2.9, 2.85, 2.8])
    assert train.get_color() == val.get_color() and train.get_linewidth() < val.get_linewidth()
    assert key.get_label().startswith("train/loss")
    assert len(ax.collections) == 1  # the ± std band over the seeds
    assert ax.get_xlabel() == "optimizer step"
    assert ax.get_title() == "val/loss and train/loss during training (mean ± std over seeds)"


def three_configurations_two_seeds(root: Path) -> Path:
    """pos=learned,rope,alibi x seed=1,2, where rope and alibi have the same curves (one would hide
    the other if both were drawn alike)."""
    finals = {"learned": (2.3, 2.5), "rope": (2.0, 2.2), "alibi": (2.0, 2.2)}
    job = 0
    for pos, seeds in finals.items():
        for seed, final in zip((1, 2), seeds):
            write_run(
                root / str(job),
                config(model__pos__name=pos, seed=seed),
                val=val_losses(final),
                test={"test/loss": final},
                summary_fields={"train_tokens": 30 * 512, "flops_per_token": {"chinchilla": 1e6}},
            )
            job += 1
    return root


def test_overlapping_configurations_stay_distinguishable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = capture_figures(monkeypatch)
    paths = learning_curve_plots(read_sweep([three_configurations_two_seeds(tmp_path)]), tmp_path)
    assert [p.name for p in paths] == [
        "val-loss_curves.png",
        "val-loss_curves_by_tokens.png",
        "val-loss_curves_by_flops.png",
        "val-loss_curves_by_time.png",
    ]
    ax = figures[0].axes[0]
    means = [line for line in ax.lines if line.get_label().startswith("model.pos.name=")]
    assert len(means) == 3
    looks = {(line.get_color(), line.get_marker(), line.get_linestyle()) for line in means}
    assert len(looks) == 3 and len({m for _, m, _ in looks}) == 3 and len({s for _, _, s in looks}) == 3
    rope, alibi = (next(x for x in means if x.get_label().endswith(p)) for p in ("rope", "alibi"))
    np.testing.assert_allclose(rope.get_ydata(), alibi.get_ydata())  # drawn over each other, told apart
    assert len(ax.collections) == 3  # a spread band per configuration
    by_flops = figures[2].axes[0]
    assert by_flops.get_xscale() == "log"
    np.testing.assert_allclose(by_flops.lines[0].get_xdata(), np.array([10, 20, 30]) * 512 * 1e6)


def test_a_resumed_run_has_no_tokens_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed run's summary counts the tokens since the resume only: its tokens are unknown."""
    three_configurations_two_seeds(tmp_path)
    cfg = config(model__pos__name="rope", seed=3, ckpt_path="/runs/x/checkpoints/last.ckpt")
    write_run(tmp_path / "6", cfg, summary_fields={"train_tokens": 10 * 512})
    capture_figures(monkeypatch)
    sweep = read_sweep([tmp_path])
    assert sweep.runs["train_tokens"].isna().tolist() == [False] * 6 + [True]
    paths = learning_curve_plots(sweep, tmp_path)
    assert [p.name for p in paths] == ["val-loss_curves.png", "val-loss_curves_by_time.png"]


def test_a_one_point_curve_is_said_to_be_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_run(tmp_path / "0", config(seed=1), val={30: 2.0})
    write_run(tmp_path / "1", config(seed=2), val={30: 2.1})
    figures = capture_figures(monkeypatch)
    learning_curve_plots(read_sweep([tmp_path]), tmp_path)
    texts = [t.get_text() for t in figures[0].axes[0].texts]
    assert "one point only: all runs" in texts


def test_close_values_keep_an_axis_a_tenth_of_a_nat_tall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two configurations 0.01 nats apart: the axis spans 0.1 nats, so the gap is a tenth of it."""
    for job, (pos, final) in enumerate((("rope", 2.0), ("alibi", 2.01))):
        write_run(tmp_path / str(job), config(model__pos__name=pos), val={30: final}, test={"test/loss": 2})
    figures = capture_figures(monkeypatch)
    write_report(read_sweep([tmp_path]), tmp_path / "out")
    by_key = next(f.axes[0] for f in figures if "by model.pos.name" in f.axes[0].get_title())
    low, high = by_key.get_ylim()
    assert high - low == pytest.approx(0.1)
    assert any("at least 0.1 nats per token tall" in t.get_text() for t in by_key.texts)


def capture_figures(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The figures the plots module would save, kept for inspection instead."""
    figures: list[Figure] = []
    monkeypatch.setattr("attnlab.report.plots.save", lambda fig, path: figures.append(fig) or path)
    return figures


def test_length_plot_lines_are_means_over_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = read_sweep([with_length_evals(pos_seed_sweep(tmp_path))])
    figures = capture_figures(monkeypatch)
    (path,) = length_plots(sweep, tmp_path)
    assert path.name == "val-loss_by_length.png"
    ax = figures[0].axes[0]
    lines = {line.get_label(): line for line in ax.lines}
    assert set(lines) == {"model.pos.name=learned", "model.pos.name=alibi", "training length"}
    np.testing.assert_allclose(lines["model.pos.name=learned"].get_xdata(), [64, 128, 256])
    np.testing.assert_allclose(lines["model.pos.name=learned"].get_ydata(), [2.01, 2.51, 3.51])
    np.testing.assert_allclose(lines["model.pos.name=alibi"].get_ydata(), [2.04, 2.04, 2.04])
    np.testing.assert_allclose(lines["training length"].get_xdata(), [64, 64])
    assert ax.get_xscale() == "log"
    assert "(tokens, log2 scale)" in ax.get_xlabel()
    assert ax.get_ylabel() == "val/loss (nats per token)"


def test_a_setting_the_length_sets_does_not_split_a_length_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RoPE stretched at each length by its own factor (length / 64): one line per scaling across the
    lengths, not one point per factor."""
    root = pos_seed_sweep(tmp_path)
    for job in range(6):
        if (root / str(job) / "test_metrics.json").exists():
            for length in (128, 256):
                for scaling in ("linear", "yarn"):
                    overrides = {"data.seq_len": length, "model.pos.rope_scaling": scaling,
                                 "model.pos.rope_factor": length // 64}  # fmt: skip
                    write_eval(
                        root / str(job), f"e/{length}/{scaling}", {"val/loss": 2.5}, overrides=overrides
                    )
    figures = capture_figures(monkeypatch)
    length_plots(read_sweep([root]), tmp_path)
    labels = {line.get_label() for line in figures[0].axes[0].lines} - {"training length"}
    assert all("rope_factor" not in label for label in labels)
    assert any(label.endswith("model.pos.rope_scaling=linear") for label in labels)
    for line in figures[0].axes[0].lines:
        if line.get_label().endswith("rope_scaling=yarn"):
            np.testing.assert_allclose(line.get_xdata(), [128, 256])


def test_200_jobs(tmp_path: Path) -> None:
    """A 200-job sweep: 40 configurations of 5 seeds, each with a 100-line metrics file."""
    job = 0
    for pos in ("none", "sinusoidal", "learned", "rope", "alibi"):
        for n_layers in (1, 2, 4, 8):
            for lr in (1e-3, 3e-3):
                for seed in range(5):
                    cfg = config(model__pos__name=pos, model__n_layers=n_layers, optim__lr=lr, seed=seed)
                    write_run(
                        tmp_path / str(job), cfg, val=val_losses(2.0 + seed / 10, tuple(range(10, 510, 10)))
                    )
                    job += 1
    sweep = read_sweep([tmp_path])
    report = write_report(sweep, tmp_path)
    assert len(report.tables["Runs"]) == 200
    configurations = report.tables["Configurations (mean ± std over seeds)"]
    assert len(configurations) == 40
    assert set(configurations["n"]) == {5}
    assert set(configurations["val/loss best"]) == {"2.2 ± 0.16"}
    assert len(report.plots) == 5  # by pos, by n_layers, by lr; the curves by step and by wall time


def test_the_baseline_curve_is_bold_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = capture_figures(monkeypatch)
    sweep = read_sweep([three_configurations_two_seeds(tmp_path)])
    learning_curve_plots(sweep, tmp_path, baseline="model.pos.name=rope")
    for figure in figures:  # step, tokens, FLOPs, wall time
        (bold,) = [line for line in figure.axes[0].lines if line.get_label().endswith("(baseline)")]
        assert bold.get_label() == "model.pos.name=rope (baseline)"
        assert bold.get_linewidth() > 2 and bold.get_color() == "black"


def test_the_wall_time_curve_averages_each_steps_time_over_the_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 2 took three times as long: at steps 10 and 20 the line is at the mean of the seeds' times
    (1.05 s and 3.15 s, 2.05 s and 6.15 s), not one point per seed."""
    for seed in (1, 2):
        write_run(tmp_path / str(seed), config(seed=seed), val=val_losses(2.0, (10, 20)))
    metrics = tmp_path / "2" / "metrics.jsonl"
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps({**r, "time_s": 3 * r["time_s"]}) + "\n" for r in lines))
    figures = capture_figures(monkeypatch)
    paths = learning_curve_plots(read_sweep([tmp_path]), tmp_path)
    assert paths[-1].name == "val-loss_curves_by_time.png"
    val = figures[-1].axes[0].lines[0]
    np.testing.assert_allclose(val.get_xdata(), [2.1, 4.1])
    np.testing.assert_allclose(val.get_ydata(), [2.25, 2.0])


@pytest.mark.process_contract("interpreter")
def test_two_reports_of_one_sweep_at_once_both_succeed(tmp_path: Path) -> None:
    """Each process writes its own temporary files (they collided on ``<name>.tmp``): two interpreters
    at once both exit 0, leave whole files and no temporary one."""
    import os

    import processes

    root = with_length_evals(pos_seed_sweep(tmp_path / "sweep", failed_seed=2))
    command = processes.python_module("attnlab.cli.report", [str(root)])
    env = {**os.environ, "MPLBACKEND": "Agg"}
    both = [processes.start(command, tmp_path, env) for _ in range(2)]
    results = [(done.returncode, done.stderr) for done in (p.result(timeout=300) for p in both)]
    assert [code for code, _ in results] == [0, 0], results
    assert all(p.read_bytes().startswith(PNG) for p in (root / "plots").glob("*.png"))
    assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def test_another_writers_temporary_file_is_left_alone(tmp_path: Path) -> None:
    """A ``<name>.tmp`` beside a report file (another report's, or a link elsewhere) is neither
    written through nor taken over."""
    sweep = read_sweep([pos_seed_sweep(tmp_path / "sweep", failed_seed=2)])
    outside = tmp_path / "outside.txt"
    outside.write_text("not the report's\n")
    (tmp_path / "out" / "plots").mkdir(parents=True)
    (tmp_path / "out" / "report.md.tmp").symlink_to(outside)
    (tmp_path / "out" / "plots" / "val-loss_curves.png.tmp").write_text("another report's, half written")
    report = write_report(sweep, tmp_path / "out")
    assert outside.read_text() == "not the report's\n"
    assert (
        tmp_path / "out" / "plots" / "val-loss_curves.png.tmp"
    ).read_text() == "another report's, half written"
    assert (
        report.markdown.read_text().startswith("#")
        and (tmp_path / "out" / "report.md").stat().st_mode & 0o044
    )
