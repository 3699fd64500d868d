"""``attnlab-eval`` reads its checkpoint's run config once: validation types it, before any folder
exists, and hands it to the job (``cli.hydra.app.checked_by_validation``), rather than a cache hiding
a second read."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_cli import TEXT, TINY, run_command, train_in_process

from attnlab.run import eval_data

GPT = [*TINY, *TEXT, "model=gpt-tiny", "sample.max_new_tokens=0", "logger=none"]
EVAL = ["logger=none", "trainer.enable_progress_bar=false", "split=val", "limit_batches=1"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("eval_reads_once") / "run"
    train_in_process([*GPT, "trainer.max_steps=2"], run_dir)
    return run_dir / "checkpoints" / "last.ckpt"


def test_an_evaluation_reads_its_checkpoints_run_config_once(
    ckpt: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnlab.cli.eval import main

    reads: list[str] = []
    real = eval_data.read_saved_run

    def counting(path: str):
        reads.append(path)
        return real(path)

    monkeypatch.setattr(eval_data, "read_saved_run", counting)
    monkeypatch.chdir(ckpt.parents[2])
    status = run_command(main, [f"ckpt_path={ckpt}", *EVAL, "data.seq_len=16"], monkeypatch, capsys)
    assert status == 0, capsys.readouterr().err
    assert reads == [str(ckpt)]
