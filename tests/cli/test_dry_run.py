"""``attnlab-train dry_run=true``: every check a run makes before its directory exists (the schema, the
data's files, the checkpoint to resume, each job of a multirun), the resolved config printed, nothing
trained or written, exit 0; it refuses, in the same line, what the run refuses.
In this process, as the console script runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_cli import run_command

from attnlab.cli.train import main

TINY = ["model=gpt-tiny", "data.seq_len=32"]


def test_a_dry_run_prints_the_resolved_config_and_writes_nothing(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_command(main, [*TINY, "model.n_layers=3", "dry_run=true"], monkeypatch, capsys) == 0
    out = capsys.readouterr().out
    assert "  n_layers: 3\n" in out and "\nrun_dir: outputs/" in out and "${" not in out  # resolved
    assert out.endswith("dry run: the config is valid; nothing was trained or written\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["model.n_heads=8", "model.d_model=100"],  # the schema's rules
        ["data.path=missing.txt"],  # the data's files
        ["ckpt_path=missing.ckpt"],  # the checkpoint to resume
        ["-m", "model.n_heads=2,3"],  # each job of a multirun
    ],
)
def test_a_dry_run_refuses_what_the_run_refuses(args: list[str], monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    flags, overrides = [a for a in args if a == "-m"], [*TINY, *(a for a in args if a != "-m")]
    assert run_command(main, [*flags, *overrides, "dry_run=true"], monkeypatch, capsys) == 2
    dry = capsys.readouterr().err
    assert run_command(main, [*flags, *overrides, "trainer.max_steps=1"], monkeypatch, capsys) == 2
    assert dry.startswith("error: ") and dry == capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_of_a_multirun_checks_every_job(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_command(main, ["-m", *TINY, "pos=rope,alibi", "dry_run=true"], monkeypatch, capsys) == 0
    assert capsys.readouterr().out.endswith(
        "dry run: every job of the multirun is valid; nothing was trained\n"
    )
    assert list(tmp_path.iterdir()) == []
