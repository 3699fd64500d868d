"""attnlab-train on the synthetic tasks: bad settings refused before the run directory; a tiny GPT
learns copy at length 16 and is scored at 16 and 32 by one attnlab-eval call."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from train_cli import TINY, check, command_here, copy_learned_at_16


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["data=passkey", "data.passkey_depth=1.5"], "error: data.passkey_depth=1.5: must be in [0, 1]"),
        (["data=passkey", "data.passkey_depth=-0.1"], "error: data.passkey_depth=-0.1: must be in [0, 1]"),
        (["data=copy", "data.seq_len=1"], "error: data.seq_len=1: is too short for data.kind=copy"),
        (
            ["model=vit-tiny", "data=recall"],
            "error: data.kind=recall: cannot be consumed by model.family='vit' with task.name='classification'",
        ),
        (["data=copy", "data.seq_len=512"], "error: data.seq_len=512: must be at most model.max_seq_len=256"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_run_directory(
    tmp_path: Path, args: list[str], message: str, monkeypatch, capsys
) -> None:
    result = command_here([*TINY, "model=gpt-tiny", *args], tmp_path, monkeypatch, capsys)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".wandb")]


@pytest.mark.slow
def test_a_tiny_gpt_learns_copy_at_16_and_is_scored_at_16_and_32_in_one_call(
    built_once: Callable[..., Path], tmp_path: Path, monkeypatch, capsys
) -> None:
    copy_learned_at_16(built_once, tmp_path)
    trained = json.loads((tmp_path / "run" / "test_metrics.json").read_text())["metrics"]
    assert trained["test/exact_match"] >= 0.95
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    check(
        command_here(
            ["-m", f"ckpt_path={ckpt}", "data.seq_len=16,32", "logger=none"],
            tmp_path,
            monkeypatch,
            capsys,
            command="eval",
        )
    )
    evaluations = [json.loads(p.read_text()) for p in (tmp_path / "run").glob("eval/*/*/metrics.json")]
    # the job at the training length overrides nothing
    scores = {e["overrides"].get("data.seq_len", 16): e["metrics"] for e in evaluations}
    assert scores[16]["test/exact_match"] == trained["test/exact_match"]
    assert 0.0 <= scores[32]["test/exact_match"] <= 1.0 and scores[32]["test/loss"] > scores[16]["test/loss"]
