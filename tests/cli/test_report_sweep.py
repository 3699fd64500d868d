"""attnlab-report on a real sweep, as a user makes one: a multirun over positions and seeds in which
one seed of each configuration fails at run time, evaluations of one checkpoint with attnlab-eval,
then the report. The numbers it shows are checked against the runs' CSV logs, written by another
logger than the one the report reads."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
from train_cli import TEXT, TINY, check, command_here, csv_series, job_dirs, jobs_in

from attnlab.report.table import format_number

pytestmark = pytest.mark.slow
GPT = [*TINY, *TEXT, "model=gpt-tiny", "sample.max_new_tokens=0", "logger=csv"]
FAIL_SEED_3 = "+callbacks.fault={_target_:fault_injection.FailAtStep,step:2,seed:3}"
ERROR = "RuntimeError: deliberate failure at step 2"


@pytest.fixture(scope="module")
def sweep(built_once: Callable[..., Path]) -> dict:
    """pos=learned,alibi x seed=1,2,3 (seed 3 fails); the best checkpoints of jobs 0 and 3 (seed 1 of
    each) evaluated on val at the run's batch size and at 4 in one multirun; the report of it all.
    Made once per session (``built_once``): pytest-xdist's workers that run this module's tests share
    it instead of each making its own (~18 CPU-seconds); the tests only read it."""
    built = built_once("report-sweep", train_evaluate_and_report)
    jobs = jobs_in(Path((built / "sweep.dir").read_text()))
    return {"jobs": jobs, "stdout": (built / "report.stdout").read_text(), "dir": jobs[0].parent}


def train_evaluate_and_report(built: Path) -> None:
    """The sweep of ``sweep`` run in ``built / "cwd"``; in ``built``, what the report printed
    (report.stdout) and the training multirun's folder (sweep.dir)."""
    cwd = built / "cwd"
    cwd.mkdir()
    trained = command_here(["-m", "pos=learned,alibi", "seed=1,2,3", FAIL_SEED_3, *GPT], cwd)
    assert trained.returncode == 1, trained.stderr[-3000:]  # two jobs failed, the others ran
    jobs = job_dirs(cwd)
    best = ",".join(str(next((jobs[i] / "checkpoints").glob("best-*.ckpt"))) for i in (0, 3))
    evaluate = ["-m", f"ckpt_path={best}", "split=val", "batch_size=8,4", "logger=csv"]
    check(command_here([*evaluate, "trainer.enable_progress_bar=false"], cwd, command="eval"))
    report = check(command_here([str(jobs[0].parent)], cwd, command="cli.report"))
    (built / "report.stdout").write_text(report.stdout)
    (built / "sweep.dir").write_text(str(jobs[0].parent))  # the evaluations' multirun lies beside it


def test_each_evaluation_lies_in_the_run_it_evaluated(sweep: dict) -> None:
    """``attnlab-eval -m`` writes ``<run>/eval/<sweep time>/<job>_<label>/metrics.json``, with what it
    changed, into the run of each job's checkpoint; the label is the swept values but the checkpoint."""
    jobs = sweep["jobs"]
    first, second = ["0_batch_size-8", "1_batch_size-4"], ["2_batch_size-8", "3_batch_size-4"]
    for run, numbers in ((jobs[0], first), (jobs[3], second)):
        evals = sorted(run.glob("eval/*/*/metrics.json"))
        assert [p.parent.name for p in evals] == numbers
        records = [json.loads(p.read_text()) for p in evals]
        assert [r["overrides"] for r in records] == [{}, {"data.batch_size": 4}]  # 8 is the run's own
        assert {r["split"] for r in records} == {"val"}
        # Unchanged, the evaluation measures what validation during training measured at that checkpoint.
        best = json.loads((run / "summary.json").read_text())["best"]
        assert best["metric"] == "val/loss" and best_val_loss(run) == pytest.approx(best["value"])
        assert records[0]["metrics"]["val/loss"] == pytest.approx(best["value"], rel=1e-5)
    for job in (jobs[1], jobs[2], jobs[4], jobs[5]):
        assert not (job / "eval").exists()


def test_failed_jobs_say_so_in_their_summary(sweep: dict) -> None:
    summaries = [json.loads((job / "summary.json").read_text()) for job in sweep["jobs"]]
    assert [s["status"] for s in summaries] == ["completed", "completed", "failed"] * 2
    assert [s["error"] for s in summaries] == [None, None, ERROR] * 2
    assert {s["final_step"] for s in summaries if s["status"] == "completed"} == {6}


def best_val_loss(job: Path) -> float:
    """The best val/loss of a run, read from its CSV log rather than from metrics.jsonl."""
    return min(csv_series(job, "val/loss").values())


def table_rows(markdown: str, title: str) -> list[dict[str, str]]:
    """The rows of the markdown table under ``## <title>`` in report.md, as {column: cell}."""
    section = markdown.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header, _, *rows = ([cell.strip() for cell in line.strip("|").split("|")] for line in lines)
    return [dict(zip(header, row)) for row in rows]


def test_one_row_per_job_with_each_failed_jobs_error(sweep: dict) -> None:
    text = (sweep["dir"] / "report.md").read_text()
    assert "6 runs: 4 completed, 2 failed." in text
    assert "Swept: model.pos.name, seed." in text
    rows = table_rows(text, "Runs")
    assert [(r["job"], r["model.pos.name"], r["seed"], r["status"]) for r in rows] == [
        ("0_pos-learned+seed-1", "learned", "1", "completed"),  # the job folders: number, swept values
        ("1_pos-learned+seed-2", "learned", "2", "completed"),
        ("2_pos-learned+seed-3", "learned", "3", "failed"),
        ("3_pos-alibi+seed-1", "alibi", "1", "completed"),
        ("4_pos-alibi+seed-2", "alibi", "2", "completed"),
        ("5_pos-alibi+seed-3", "alibi", "3", "failed"),
    ]
    assert [r["error"] for r in rows] == ["", "", ERROR] * 2
    for row, job in zip(rows, sweep["jobs"]):
        if row["status"] == "completed":
            assert row["val/loss best"] == format_number(best_val_loss(job))
            assert row["steps"] == "6"
            assert int(row["params"].replace(",", "")) > 0
            assert float(row["tokens/s"].replace(",", "")) > 0
        else:
            assert row["val/loss best"] == ""
    section = text.split("## Runs\n", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    assert f"\nRuns\n\n{table}\n" in sweep["stdout"]  # the table is printed too


def test_seeds_of_a_configuration_are_averaged(sweep: dict) -> None:
    rows = table_rows((sweep["dir"] / "report.md").read_text(), "Configurations (mean ± std over seeds)")
    assert [(r["model.pos.name"], r["n"], r["status"]) for r in rows] == [
        ("learned", "2", "2 completed, 1 failed"),
        ("alibi", "2", "2 completed, 1 failed"),
    ]
    for row, seeds in zip(rows, (sweep["jobs"][0:2], sweep["jobs"][3:5])):
        losses = [best_val_loss(job) for job in seeds]
        mean, std = statistics.mean(losses), statistics.stdev(losses)
        assert row["val/loss best"] == format_number(mean) + (f" ± {format_number(std, 2)}" if std else "")


def test_evaluations_are_listed_with_what_they_changed(sweep: dict) -> None:
    rows = table_rows(
        (sweep["dir"] / "report.md").read_text(), "Evaluations (attnlab-eval, mean ± std over seeds)"
    )
    assert [(r["model.pos.name"], r["eval data.batch_size"], r["split"], r["n"]) for r in rows] == [
        ("learned", "8", "val", "1"),
        ("learned", "4", "val", "1"),
        ("alibi", "8", "val", "1"),
        ("alibi", "4", "val", "1"),
    ]


def test_plots_are_written_and_linked(sweep: dict) -> None:
    text = (sweep["dir"] / "report.md").read_text()
    plots = sorted(p.name for p in (sweep["dir"] / "plots").glob("*.png"))
    assert plots == ["val-loss_by_model.pos.name.png", "val-loss_curves.png", "val-loss_curves_by_time.png"]
    for name in plots:
        assert (sweep["dir"] / "plots" / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        assert f"](plots/{name})" in text
    assert (sweep["dir"] / "runs.csv").is_file()


def test_a_job_refused_by_validation_is_reported_with_its_error(tmp_path: Path) -> None:
    """A multirun job whose config is refused has no config.yaml; its summary.json and Hydra's composed
    config still make it a row, with the one-line error the console printed. (A bad value of the grid
    stops the multirun before any job; a model that does not fit the data is found when the job
    builds its data.)"""
    result = command_here(["-m", "model.vocab_size=0,20", *GPT], tmp_path)
    assert result.returncode == 1
    ok, refused = job_dirs(tmp_path)
    summary = json.loads((refused / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["error"].startswith("model.vocab_size=20: the tokenizer (data.tokenizer='char') has ")
    assert not (refused / "config.yaml").exists()
    check(command_here([str(ok.parent)], tmp_path, command="cli.report"))
    rows = table_rows((ok.parent / "report.md").read_text(), "Runs")
    assert [(r["model.vocab_size"], r["status"], r["error"]) for r in rows] == [
        ("0", "completed", ""),
        ("20", "failed", summary["error"]),
    ]


def test_a_missing_checkpoint_among_swept_ones_stops_the_evaluation_at_once(sweep: dict) -> None:
    good = next((sweep["jobs"][1] / "checkpoints").glob("best-*.ckpt"))
    missing = sweep["jobs"][2] / "checkpoints" / "best-step000006.ckpt"  # seed 3 failed before it
    result = command_here(["-m", f"ckpt_path={good},{missing}", "logger=csv"], sweep["dir"], command="eval")
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()
        == [  # as every refused job of a sweep: its number, what it sweeps
            f"error: job 1 (ckpt_path={missing}): ckpt_path={missing}: no such checkpoint file"
        ]
    )
    assert not (sweep["jobs"][1] / "eval").exists()


def test_report_without_arguments_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from attnlab.cli.report import main

    with pytest.raises(SystemExit) as exit_:
        main([])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: the following arguments are required: paths (see attnlab-report --help)"
    ]
