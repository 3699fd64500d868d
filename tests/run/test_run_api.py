"""The commands as library calls (``attnlab.run``): a tiny GPT trained, evaluated, sampled, compressed,
exported and reported in this process, each call writing what its command writes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from attnlab import run
from attnlab.schema.errors import ConfigError
from attnlab.schema.run import RunConfig

TINY = [
    "model=gpt-tiny",
    "data.seq_len=32",
    "data.batch_size=8",
    "trainer.max_steps=4",
    "trainer.val_every_n_steps=2",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.enable_progress_bar=false",
    "logger=none",
    "sample.max_new_tokens=0",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> run.RunResult:
    return run.train(run.run_config(TINY), tmp_path_factory.mktemp("gpt") / "run")


def test_run_config_is_the_validated_run_of_the_command_line() -> None:
    config = run.run_config(["model=gpt-tiny", "pos=rope", "optim.lr=0.01"])
    assert isinstance(config, RunConfig)
    assert config.model.family == "gpt" and config.model.pos.name == "rope" and config.optim.lr == 0.01
    with pytest.raises(ConfigError, match=r"optim\.lr"):
        run.run_config(["optim.lr=-1"])


def test_train_returns_what_the_run_directory_records(trained: run.RunResult) -> None:
    assert trained.checkpoint == trained.run_dir / "checkpoints" / "last.ckpt" and trained.checkpoint.exists()
    assert math.isfinite(trained.best)
    assert set(trained.test_metrics) >= {"test/loss"}
    assert (trained.run_dir / "config.yaml").exists()


def test_a_run_that_cannot_train_is_refused_before_its_directory(tmp_path: Path) -> None:
    config = run.run_config([*TINY, "ckpt_path=last"])  # nothing to resume in a new directory
    with pytest.raises(ConfigError, match=r"ckpt_path"):
        run.train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_evaluate_writes_the_metrics_of_a_split(trained: run.RunResult, tmp_path: Path) -> None:
    metrics = run.evaluate(
        trained.checkpoint, tmp_path / "eval", ["split=val", "limit_batches=2", "logger=none"]
    )
    written = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert written["metrics"] == metrics and "val/loss" in metrics


def test_sample_continues_a_prompt(trained: run.RunResult) -> None:
    cmd = run.command_config(
        "sample", [f"ckpt_path={trained.checkpoint}", "prompt=To be", "max_new_tokens=5"]
    )
    assert run.sample(cmd).splitlines()[1].startswith("To be")


def test_compress_and_export_write_their_files(trained: run.RunResult, tmp_path: Path) -> None:
    out = tmp_path / "int8.ckpt"
    cmd = run.command_config("compress", [f"ckpt_path={trained.checkpoint}", "method=int8", f"out={out}"])
    assert run.compress(cmd) == out and out.is_file()
    folder = run.export(
        run.command_config("export", [f"ckpt_path={trained.checkpoint}", f"out={tmp_path / 'hf'}"])
    )
    assert (folder / "config.json").is_file()


def test_report_reads_the_run_directories(trained: run.RunResult, tmp_path: Path) -> None:
    report = run.report([trained.run_dir], tmp_path / "report")
    assert report.markdown.is_file() and report.csv.is_file()
