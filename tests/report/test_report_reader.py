"""Reading run directories: finding them, their status, their metrics, and bad input named in one line."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import yaml
from rundirs import config, val_losses, write_eval, write_run

from attnlab.report import ReportError, find_run_dirs, read_sweep


def test_finds_runs_in_natural_order_and_not_inside_runs(tmp_path: Path) -> None:
    for job in (0, 2, 10):
        write_run(tmp_path / "sweep" / str(job), config(seed=job))
    write_eval(tmp_path / "sweep" / "2", "2025-01-01/12-00-00", {"val/loss": 2.0})  # has its own config.yaml
    (tmp_path / "sweep" / "multirun.yaml").write_text("{}\n")
    found = find_run_dirs([tmp_path / "sweep"])
    assert [p.name for p in found] == ["0", "2", "10"]
    assert find_run_dirs([str(tmp_path / "sweep" / "1*"), tmp_path / "sweep" / "10"]) == found[2:]


def test_a_path_without_runs_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match=r"empty: no run directories found \(folders holding config.yaml\)"):
        read_sweep([tmp_path / "empty"])
    with pytest.raises(ReportError, match=r"nowhere\*: no such file or directory"):
        read_sweep([tmp_path / "nowhere*"])


def test_status_of_every_kind_of_run(tmp_path: Path) -> None:
    write_run(tmp_path / "0", config(seed=0), test={"test/loss": 2.1})
    write_run(tmp_path / "1", config(seed=1), status="failed", error="data.path=/x: no such file", val={})
    write_run(tmp_path / "2", config(seed=2), status="running")  # killed: its summary still says running
    write_run(tmp_path / "3", config(seed=3), status="interrupted")
    write_run(tmp_path / "4", config(seed=4), test={"test/loss": 2.0})
    write_run(tmp_path / "5", config(seed=5))
    for old in ("4", "5"):  # runs made before summary.json existed
        (tmp_path / old / "summary.json").unlink()
    runs = read_sweep([tmp_path]).runs
    assert runs["status"].to_dict() == {
        "0": "completed",
        "1": "failed",
        "2": "incomplete",
        "3": "interrupted",
        "4": "completed",
        "5": "unknown",
    }
    assert runs.loc["1", "error"] == "data.path=/x: no such file"
    assert runs["error"].drop("1").isna().all()


def test_final_and_best_values_follow_the_monitor_mode(tmp_path: Path) -> None:
    write_run(tmp_path / "a", config(), val={10: 2.5, 20: 2.2, 30: 2.3}, test={"test/loss": 2.25})
    acc = config(task__monitor="val/acc", task__monitor_mode="max")
    run = write_run(tmp_path / "b", acc, val={10: 2.5, 20: 2.2, 30: 2.3})
    with open(run / "metrics.jsonl", "a") as f:
        for step, value in ((10, 0.4), (20, 0.7), (30, 0.6)):
            f.write(json.dumps({"step": step, "time_s": 9.0, "val/acc": value}) + "\n")
    runs = read_sweep([tmp_path]).runs
    assert runs.loc["a", "val/loss best"] == 2.2
    assert runs.loc["a", "val/loss final"] == 2.3
    assert runs.loc["a", "val/ppl best"] == pytest.approx(math.exp(2.2))  # loss and ppl: lower is better
    assert runs.loc["a", "test/loss"] == 2.25
    assert runs.loc["b", "val/acc best"] == 0.7
    assert runs.loc["b", "val/acc final"] == 0.6
    assert list(runs["monitor"]) == ["val/loss", "val/acc"]


def test_bits_per_byte_is_lower_is_better(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", config(), val={10: 2.5, 20: 2.2, 30: 2.3})
    with open(run / "metrics.jsonl", "a") as f:
        for step, value in ((10, 1.4), (20, 1.1), (30, 1.2)):
            f.write(json.dumps({"step": step, "time_s": 9.0, "val/bpb": value}) + "\n")
    runs = read_sweep([tmp_path]).runs
    assert (runs.loc["a", "val/bpb best"], runs.loc["a", "val/bpb final"]) == (1.1, 1.2)


def test_a_garbled_metrics_line_is_skipped_with_its_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = write_run(tmp_path / "0", config(), val={10: 2.5, 20: 2.2})
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines.insert(2, '{"step": 7, "val/lo')  # a line cut short by a kill
    lines.append("[1, 2]")
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="attnlab.report"):
        sweep = read_sweep([tmp_path])
    assert sweep.runs.loc["0", "val/loss best"] == 2.2
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        f"{run / 'metrics.jsonl'}:3: skipped: not a JSON object with an integer step",
        f"{run / 'metrics.jsonl'}:{len(lines)}: skipped: not a JSON object with an integer step",
    ]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("config.yaml", "model: {family: gpt\nseed: [1\n", r"config.yaml:\d+: not valid YAML"),
        ("config.yaml", "- just\n- a list\n", r"config.yaml: not a config \(a YAML mapping\); found list"),
        ("summary.json", '{"status": "compl', r"summary.json: not valid JSON"),
        ("test_metrics.json", "[]", r"test_metrics.json: not a JSON object; found list"),
    ],
)
def test_an_unreadable_file_is_one_line_naming_it(tmp_path: Path, name: str, text: str, message: str) -> None:
    run = write_run(tmp_path / "0", config(), test={"test/loss": 2.0})
    (run / name).write_text(text)
    with pytest.raises(ReportError, match=message) as err:
        read_sweep([tmp_path])
    assert str(err.value).startswith(str(run / name))
    assert "\n" not in str(err.value)


def test_steps_logged_twice_count_once(tmp_path: Path) -> None:
    """A resume in place that logged a step again must not double a point of the curve."""
    run = write_run(tmp_path / "0", config(), val={10: 2.5, 20: 2.4})
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 20, "time_s": 5.0, "val/loss": 2.3}) + "\n")
    curves = read_sweep([tmp_path]).curves
    assert curves["step"].tolist() == [5, 10, 15, 20]
    assert curves.set_index("step").loc[20, "val/loss"] == 2.3


def test_a_killed_run_takes_its_figures_from_its_curve(tmp_path: Path) -> None:
    write_run(tmp_path / "0", config(), status="running", val=val_losses(2.0, (10, 20)), tokens_per_s=800.0)
    run = read_sweep([tmp_path]).runs.loc["0"]
    assert run["status"] == "incomplete"
    assert run["final_step"] == 20
    assert run["wall_time_s"] == pytest.approx(2.05)  # the time of its last line
    assert run["tokens_per_s"] == 800.0
    assert run["n_params"] == 12345  # written at the start


def test_a_job_that_failed_validation_is_a_row_with_its_swept_value(tmp_path: Path) -> None:
    """A multirun job refused by validation leaves Hydra's composed config and the failed summary."""
    write_run(tmp_path / "0", config(model__n_heads=4), test={"test/loss": 2.0})
    job = tmp_path / "1"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config(model__n_heads=3)))
    error = "model.d_model=32: must be divisible by model.n_heads=3"
    (job / "summary.json").write_text(json.dumps({"status": "failed", "error": error}))
    sweep = read_sweep([tmp_path])
    assert sweep.configs["model.n_heads"].tolist() == [4, 3]
    assert sweep.runs.loc["1", "status"] == "failed"
    assert sweep.runs.loc["1", "error"] == error


def test_an_old_eval_output_is_not_a_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_run(tmp_path / "runs" / "0", config())
    old = tmp_path / "eval" / "2025-01-01" / "12-00-00"
    old.mkdir(parents=True)
    (old / "config.yaml").write_text(yaml.safe_dump({"ckpt_path": "x.ckpt", "split": "test"}))
    with caplog.at_level(logging.WARNING, logger="attnlab.report"):
        sweep = read_sweep([tmp_path])
    assert list(sweep.runs.index) == ["0"]
    assert "not a training run" in caplog.text


def test_evaluations_keep_their_overrides_and_the_newest_repeat(tmp_path: Path) -> None:
    run = write_run(tmp_path / "0", config())
    write_eval(run, "a", {"val/loss": 2.0}, overrides={"data.seq_len": 64})
    write_eval(run, "b", {"val/loss": 2.9}, overrides={"data.seq_len": 128})
    write_eval(run, "c", {"val/loss": 2.8}, overrides={"data.seq_len": 128})  # the same again, later
    write_eval(run, "d", {"test/loss": 2.1}, split="test", ckpt="last.ckpt")
    sweep = read_sweep([tmp_path])
    assert sweep.eval_keys == ["data.seq_len"]
    evals = sweep.evals.set_index("name")
    assert list(evals.index) == ["a", "c", "d"]
    assert evals.loc["c", "val/loss"] == 2.8
    assert evals.loc["d", "ckpt"] == "last"
    assert evals.loc["a", "ckpt"] == "best"
    assert evals.loc["d", "data.seq_len"] is None  # not overridden
    assert type(evals.loc["a", "data.seq_len"]) is int  # as given, not 64.0


def test_metric_option_must_name_a_logged_metric(tmp_path: Path) -> None:
    write_run(tmp_path / "0", config(), test={"test/loss": 2.0})
    assert read_sweep([tmp_path], metric="val/ppl").monitors == ["val/ppl"]
    with pytest.raises(
        ReportError,
        match=r"--metric=val/bleu: no run logged it; logged metrics: val/loss, val/ppl, test/loss",
    ):
        read_sweep([tmp_path], metric="val/bleu")


@pytest.mark.parametrize("text", ["", '{"metrics": {"val/loss": 2.'])
def test_a_half_written_evaluation_is_named_and_the_rest_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    """An attnlab-eval killed while writing left an empty or cut ``metrics.json``: it made the whole
    tree unreadable."""
    run = write_run(tmp_path / "0", config(), test={"test/loss": 2.0})
    write_eval(run, "a", {"val/loss": 2.0})
    (write_eval(run, "b", {"val/loss": 2.5}) / "metrics.json").write_text(text)
    with caplog.at_level(logging.WARNING, logger="attnlab.report"):
        sweep = read_sweep([tmp_path])
    assert list(sweep.evals["name"]) == ["a"] and list(sweep.runs.index) == ["0"]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"{run / 'eval' / 'b' / 'metrics.json'}: not valid JSON")
    assert warning.endswith("skipped: a half-written evaluation? (run its attnlab-eval again)")


def test_a_file_given_as_the_sweep_is_one_line(tmp_path: Path) -> None:
    """Its report went into the file's folder."""
    run = write_run(tmp_path / "0", config())
    with pytest.raises(ReportError) as err:
        read_sweep([run / "summary.json"])
    assert (
        str(err.value) == f"{run / 'summary.json'}: a file: give a run or sweep directory, or a glob of them"
    )
    assert find_run_dirs([str(tmp_path / "*" / "config.yaml")]) == [
        run.resolve()
    ]  # a glob of files still finds runs
