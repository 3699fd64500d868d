"""Bits per byte end to end: a char and a BPE model of one corpus, trained, evaluated with attnlab-eval
and reported, their ``bpb`` side by side in one table where their losses per token are not comparable."""

from __future__ import annotations

import json
import math

import pytest
from test_report_sweep import table_rows
from train_cli import TEXT, TINY, check, command_here, job_dirs

from attnlab.report.table import format_number

pytestmark = pytest.mark.slow


def test_char_and_bpe_bits_per_byte_are_logged_evaluated_and_reported_side_by_side(
    tmp_path, monkeypatch, capsys
) -> None:
    args = [
        "-m",
        "data.tokenizer=char,bpe",
        "data.bpe_vocab_size=512",
        "model=gpt-tiny",
        "sample.max_new_tokens=0",
    ]
    check(command_here([*args, *TINY, *TEXT], tmp_path, monkeypatch, capsys))
    char, bpe = job_dirs(tmp_path)
    ckpt = next((bpe / "checkpoints").glob("best-*.ckpt"))
    check(
        command_here(
            [f"ckpt_path={ckpt}", "split=test", "trainer.enable_progress_bar=false"],
            tmp_path,
            monkeypatch,
            capsys,
            command="eval",
        )
    )
    (evaluation,) = [json.loads(p.read_text()) for p in bpe.glob("eval/*/metrics.json")]
    assert evaluation["metrics"]["test/bpb"] > 0

    finals = {}
    for job in (char, bpe):
        val = [
            r for r in map(json.loads, (job / "metrics.jsonl").read_text().splitlines()) if "val/loss" in r
        ]
        assert all(r["val/bpb"] > 0 for r in val)  # every validation, beside the loss
        finals[job] = val[-1]
        assert json.loads((job / "test_metrics.json").read_text())["metrics"]["test/bpb"] > 0
    # A BPE token spans several bytes: its bits per byte are well below its bits per token; a char
    # token of this mostly-ASCII corpus is about one byte.
    bits = {job: finals[job]["val/loss"] / math.log(2) for job in finals}
    assert finals[bpe]["val/bpb"] < bits[bpe] / 1.5  # ~2 bytes a token at 512 tokens
    assert finals[char]["val/bpb"] == pytest.approx(bits[char], rel=0.05)

    report = check(command_here([str(char.parent)], tmp_path, monkeypatch, capsys, command="cli.report"))
    rows = table_rows((char.parent / "report.md").read_text(), "Runs")
    assert [r["data.tokenizer"] for r in rows] == ["char", "bpe"]
    for row, job in zip(rows, (char, bpe)):
        assert row["val/bpb final"] == format_number(finals[job]["val/bpb"])
        assert row["test/bpb"] != ""
    assert "val/bpb" in report.stdout
