"""``hydra/sweeper=interleaved``: a multirun's jobs run seed by seed (A, B, A, B, ...), so that drift
of a shared machine falls on both sides of a comparison; the jobs checked up front are numbered as
they run. The multiruns run in this process (``command_here``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from in_process import restored
from train_cli import TEXT, check, command_here, job_dirs

from attnlab.cli.hydra.hydra_shims import basic_sweeper
from attnlab.cli.hydra.sweep_jobs import seeds_first

QUICK = [
    *TEXT,
    "model=gpt-tiny",
    "data.batch_size=4",
    "trainer.max_steps=1",
    "trainer.val_every_n_steps=1",
    "trainer.limit_val_batches=1",
    "trainer.enable_progress_bar=false",
    "test_after_fit=false",
    "sample.max_new_tokens=0",
    "logger=none",
]


def grid(lines: list[str]) -> list[list[str]]:
    return basic_sweeper().split_arguments(OverridesParser.create().parse_overrides(lines), None)[0]


def test_the_seed_varies_slowest_wherever_it_is_given() -> None:
    jobs = grid(
        [
            str(o.input_line)
            for o in seeds_first(
                OverridesParser.create().parse_overrides(
                    ["pos=rope,alibi", "trainer.max_steps=5", "seed=1,2,3"]
                )
            )
        ]
    )
    swept = [[o for o in job if not o.startswith("trainer.")] for job in jobs]
    assert swept == [
        ["seed=1", "pos=rope"], ["seed=1", "pos=alibi"],
        ["seed=2", "pos=rope"], ["seed=2", "pos=alibi"],
        ["seed=3", "pos=rope"], ["seed=3", "pos=alibi"],
    ]  # fmt: skip
    assert grid(["pos=rope,alibi", "seed=1,2"])[1] == ["pos=rope", "seed=2"]  # the basic sweeper's order


@pytest.mark.slow
def test_a_multirun_runs_its_jobs_seed_interleaved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["-m", "hydra/sweeper=interleaved", "pos=rope,alibi", "seed=1,2", *QUICK]
    with restored():
        result = check(command_here(args, tmp_path, monkeypatch, capsys))
    order = []
    for job in job_dirs(tmp_path):
        config = yaml.safe_load((job / "config.yaml").read_text())
        order.append((config["model"]["pos"]["name"], config["seed"]))
    assert order == [("rope", 1), ("alibi", 1), ("rope", 2), ("alibi", 2)]
    assert "job 1 (" in result.stdout


def test_a_bad_job_is_named_by_its_number_in_the_interleaved_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Job 1 of the interleaved grid is model.n_heads=3 with seed 1 (in the basic order it would be job 2)."""
    args = ["-m", "hydra/sweeper=interleaved", "model.n_heads=2,3", "seed=1,2", *QUICK]
    with restored():
        result = command_here(args, tmp_path, monkeypatch, capsys)
    assert result.returncode == 2
    assert result.stderr.startswith("error: job 1 (seed=1 model.n_heads=3)"), result.stderr
