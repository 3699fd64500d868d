"""A finished run's directory is not lost to the next command: a new run into it (another seed, no
``ckpt_path``) is refused in one line with every file left byte for byte, and a copy of it resumed in place
keeps its best checkpoint, its summary's best and its test metrics. The commands run in this process
(``command_here``)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from in_process import restored
from train_cli import TEXT, check, command_here

pytestmark = pytest.mark.slow
ARGS = [
    *TEXT,
    "model=gpt-tiny",
    "logger=none",
    "trainer.max_steps=4",
    "trainer.val_every_n_steps=2",
    "checkpoint.save_top_k=1",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.enable_progress_bar=false",
    "data.batch_size=8",
    "sample.max_new_tokens=0",
]


def digests(run_dir: Path) -> dict[str, str]:
    """Every file under ``run_dir`` (links as their target's name): its sha256."""
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def finished(built_once: Callable[..., Path], tmp_path: Path) -> Path:
    """A copy (in ``tmp_path / "run"``) of a finished 4-step run, validated at steps 2 and 4."""

    def finish(cwd: Path) -> None:
        with restored():
            check(command_here([*ARGS, "run_dir=run"], cwd))

    built = built_once("finished-run", finish)
    return Path(shutil.copytree(built / "run", tmp_path / "run", symlinks=True))


def test_a_second_run_into_a_finished_run_is_refused_and_changes_nothing(
    finished: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = digests(finished)
    assert {"config.yaml", "summary.json", "metrics.jsonl", "checkpoints/last.ckpt"} <= set(before)
    second = command_here([*ARGS, "run_dir=run", "seed=7"], finished.parent, monkeypatch, capsys)
    assert second.returncode == 2, second.stderr
    assert second.stderr.splitlines() == [
        "error: run_dir=run: holds another run (config.yaml, summary.json, metrics.jsonl, "
        "test_metrics.json, checkpoints/): continue it with ckpt_path=last, name another folder, or add "
        "run_dir_exists=overwrite to replace it"
    ]
    assert digests(finished) == before


def test_a_copied_run_directory_keeps_its_best_checkpoint(finished: Path, tmp_path: Path) -> None:
    """Resumed in place under another path, the copy's best checkpoint is the run's (the same file),
    not removed as another directory's; its summary and test metrics name it as the original's do."""
    copy = Path(shutil.copytree(finished, tmp_path / "moved" / "copy", symlinks=True))
    original = json.loads((finished / "summary.json").read_text())
    best = sorted(p.name for p in (finished / "checkpoints").glob("best-*.ckpt"))
    assert original["best"] is not None and len(best) == 1

    with restored():
        check(command_here([*ARGS, f"run_dir={copy}", "ckpt_path=last"], tmp_path))
    assert sorted(p.name for p in (copy / "checkpoints").glob("best-*.ckpt")) == best
    assert json.loads((copy / "summary.json").read_text())["best"] == original["best"]
    tested = json.loads((copy / "test_metrics.json").read_text())
    assert tested["ckpt_path"] == str(copy / "checkpoints" / best[0])
    assert tested["metrics"] == json.loads((finished / "test_metrics.json").read_text())["metrics"]


def test_a_sweep_job_whose_folder_holds_another_run_fails_and_leaves_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run made a job folder's before the sweep got to it: that job fails in one line naming it, its
    run's files unchanged; the sweep's other job completes."""
    other = tmp_path / "sweep" / "job0"
    (other / "checkpoints").mkdir(parents=True)
    (other / "config.yaml").write_text("seed: 7\n")
    (other / "summary.json").write_text('{"status": "completed"}\n')
    (other / "checkpoints" / "last.ckpt").write_bytes(b"the other run's state")
    before = digests(other)
    sweep = ["seed=1,2", "hydra.sweep.dir=sweep", "hydra.sweep.subdir=job${hydra.job.num}"]
    with restored():
        result = command_here(["-m", *ARGS, "trainer.max_steps=2", *sweep], tmp_path, monkeypatch, capsys)
    assert result.returncode == 1, result.stderr
    assert f"run_dir={other}: holds another run (config.yaml, summary.json, checkpoints/)" in result.stderr
    assert {k: v for k, v in digests(other).items() if not k.startswith((".hydra", "train"))} == before
    assert json.loads((tmp_path / "sweep" / "job1" / "summary.json").read_text())["status"] == "completed"
