"""The attnlab-report command: where it writes, what it prints, and one line for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report_tables import pos_seed_sweep

from attnlab.cli.report import main


def test_writes_into_the_sweep_and_prints_the_tables(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = pos_seed_sweep(tmp_path / "sweep", failed_seed=2)
    main([str(sweep)])
    out = capsys.readouterr().out
    assert (sweep / "report.md").is_file() and (sweep / "runs.csv").is_file()
    text = (sweep / "report.md").read_text()
    for title in ("Runs", "Configurations (mean ± std over seeds)"):
        section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
        assert f"\n{title}\n\n{table}\n" in out
    assert "ValueError: boom" in out  # the failed job's row
    assert f"report: {sweep / 'report.md'}" in out


def test_the_report_names_a_sweep_under_the_working_directory_by_its_relative_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = pos_seed_sweep(tmp_path / "study" / "runs")
    monkeypatch.chdir(tmp_path)
    main([str(sweep)])
    assert (sweep / "report.md").read_text().startswith("# Sweep report: study/runs\n")


def test_runs_given_by_glob_are_reported_into_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = pos_seed_sweep(tmp_path / "sweep")
    main([str(sweep / "[0-2]"), "--out", str(tmp_path / "cmp")])
    text = (tmp_path / "cmp" / "report.md").read_text()
    assert "3 runs: 3 completed." in text
    assert not (sweep / "report.md").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing"], "error: missing: no such file or directory"),
        (["empty"], "error: empty: no run directories found (folders holding config.yaml)"),
        (["sweep", "--metric", "val/acc"], "error: --metric=val/acc: no run logged it; logged metrics:"),
        (
            ["sweep", "--budget", "parsecs=3"],
            "error: --budget=parsecs=3: choose an axis of step, tokens, flops, time",
        ),
        (
            ["sweep", "--budget", "tokens=-1"],
            "error: --budget=tokens=-1: the budget must be a positive number",
        ),
        (["sweep", "--budget", "tokens"], "error: --budget=tokens: not every run records it (tokens need"),
        (
            ["sweep", "--baseline", "rope"],
            "error: --baseline=rope: names no configuration; the configurations:",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: list, message: str
) -> None:
    pos_seed_sweep(tmp_path / "sweep")
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1
