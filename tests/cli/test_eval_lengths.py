"""attnlab-eval eval.lengths=[...]: one checkpoint of a synthetic task scored at several lengths in one
call (generated answers on the KV cache, answer-token loss; RoPE stretched by length / trained
length), and the settings it refuses in one line before any directory exists."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from train_cli import check, command_here, copy_learned_at_16, run_command, tiny_checkpoints

pytestmark = pytest.mark.slow  # trains tiny runs (about 1 s each), then runs attnlab-eval in process

RUNS = {
    "copy": ["model=gpt-tiny", "pos=rope", "data=copy", "data.seq_len=16"],
    "learned": ["model=gpt-tiny", "pos=learned", "data=copy", "data.seq_len=16", "model.max_seq_len=32"],
    "passkey": ["model=gpt-tiny", "data=passkey", "data.seq_len=24", "data.passkey_digits=3"],
    "seq2seq": ["model=seq2seq-tiny", "data=copy", "data.seq_len=16"],
    "vit": ["model=vit-tiny", "model.image_size=8", "model.patch_size=2"],
}
COMMON = [
    "trainer.max_steps=2",
    "data.batch_size=8",
    "logger=none",
    "trainer.enable_progress_bar=false",
    "test_after_fit=false",
    "sample.max_new_tokens=0",
    "trainer.val_every_n_steps=2",
    "trainer.limit_val_batches=2",
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    return tiny_checkpoints(tmp_path_factory, RUNS, COMMON)


def eval_dirs(ckpt: Path) -> list[Path]:
    return sorted((ckpt.parent.parent / "eval").glob("*/metrics.json"))


@pytest.mark.parametrize(
    ("run", "args", "message"),
    [
        (
            "learned",
            ["eval.lengths=[16,64]"],
            "error: eval.lengths=64: is past the learned positional table (model.max_seq_len=32)",
        ),
        (
            "passkey",
            ["eval.lengths=[24]", "eval.depths=[0,1.5]"],
            "error: eval.depths=1.5: a depth is a fraction",
        ),
        (
            "copy",
            ["eval.lengths=[16]", "eval.depths=[0.5]"],
            "error: eval.depths=[0.5]: only data.kind=passkey",
        ),
        ("copy", ["eval.lengths=[16,1]"], "error: eval.lengths=1: is too short for data.kind=copy"),
        ("vit", ["eval.lengths=[16]"], "error: eval.lengths=[16]: scores a synthetic task"),
    ],
)
def test_bad_sweeps_fail_in_one_line_before_any_directory(
    checkpoint, monkeypatch, capsys, run: str, args: list[str], message: str
) -> None:
    from attnlab.cli.eval import main

    ckpt = checkpoint(run)
    assert run_command(main, [f"ckpt_path={ckpt}", *args], monkeypatch, capsys) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert not (ckpt.parent.parent / "eval").exists()


def run_sweep(ckpt: Path, args: list[str], monkeypatch, capsys) -> tuple[dict, str]:
    from attnlab.cli.eval import main

    before = set(eval_dirs(ckpt))
    assert run_command(main, [f"ckpt_path={ckpt}", *args], monkeypatch, capsys) == 0
    (new,) = set(eval_dirs(ckpt)) - before
    return json.loads(new.read_text()), capsys.readouterr().out


def test_rope_is_scored_as_trained_and_stretched_by_each_lengths_ratio(
    checkpoint, monkeypatch, capsys
) -> None:
    record, out = run_sweep(
        checkpoint("copy"), ["eval.lengths=[16,32,64]", "eval.examples=16"], monkeypatch, capsys
    )
    factors = {(r["rope_scaling"], r["length"]): r["rope_factor"] for r in record["lengths"]}
    assert factors == {
        (s, n): (1.0 if s == "none" else n / 16)
        for s in ("none", "linear", "ntk", "yarn")
        for n in (16, 32, 64)
    }
    assert record["trained_length"] == 16 and record["data_kind"] == "copy"
    # greedy decoding is right exactly where every teacher-forced argmax is right
    for row in record["lengths"]:
        assert row["exact_match"] == row["teacher_forced_exact"]
        assert row["answer_loss"] > 0
    yarn32 = next(r for r in record["lengths"] if r["rope_scaling"] == "yarn" and r["length"] == 32)
    assert record["metrics"]["test/exact_match/len32/yarn"] == yarn32["exact_match"]
    assert "length  depth  none exact / loss  linear exact / loss" in out


def test_report_tables_and_plots_a_length_sweep(checkpoint, monkeypatch, capsys, tmp_path: Path) -> None:
    from attnlab.cli.report import main

    ckpt = checkpoint("copy")
    run_sweep(
        ckpt, ["eval.lengths=[16,32]", "eval.examples=8", "eval.rope_scalings=[yarn]"], monkeypatch, capsys
    )
    main([str(ckpt.parent.parent), "--out", str(tmp_path)])
    table = (tmp_path / "lengths.md").read_text()
    assert "## copy (trained at 16)" in table and "| rope+yarn " in table
    assert {p.name for p in (tmp_path / "plots").glob("lengths_*")} == {
        "lengths_copy_heatmap.png",
        "lengths_copy_lines.png",
    }


def test_passkey_is_scored_at_every_depth(checkpoint, monkeypatch, capsys) -> None:
    args = ["eval.lengths=[24,48]", "eval.depths=[0,0.5,1]", "eval.rope_scalings=[]", "eval.examples=8"]
    record, _ = run_sweep(checkpoint("passkey"), args, monkeypatch, capsys)
    assert [(r["length"], r["depth"]) for r in record["lengths"]] == [
        (n, d) for n in (24, 48) for d in (0, 0.5, 1)
    ]
    assert set(record["metrics"]) == {
        f"test/{m}/len{n}/depth{d}"
        for m in ("exact_match", "answer_loss")
        for n in (24, 48)
        for d in ("0", "0.5", "1")
    }


def test_an_encoder_decoder_is_scored_on_its_greedy_decodings(checkpoint, monkeypatch, capsys) -> None:
    record, _ = run_sweep(
        checkpoint("seq2seq"), ["eval.lengths=[16,32]", "eval.examples=8"], monkeypatch, capsys
    )
    assert [r["length"] for r in record["lengths"]] == [16, 32]  # sinusoidal: no RoPE scalings
    for row in record["lengths"]:
        assert 0.0 <= row["exact_match"] <= 1.0 and row["answer_loss"] > 0


def test_a_tiny_gpt_learns_copy_at_16_and_is_scored_at_16_and_32_in_one_call(
    built_once: Callable[..., Path], tmp_path: Path
) -> None:
    copy_learned_at_16(built_once, tmp_path)
    trained = json.loads((tmp_path / "run" / "test_metrics.json").read_text())["metrics"]
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    # RoPE as trained and stretched linearly: the rows below (every scaling: the test of rope above)
    args = [f"ckpt_path={ckpt}", "eval.lengths=[16,32]", "eval.examples=256", "eval.rope_scalings=[linear]"]
    result = check(command_here(args, tmp_path, command="eval"))
    (path,) = eval_dirs(ckpt)
    rows = {(r["rope_scaling"], r["length"]): r for r in json.loads(path.read_text())["lengths"]}
    assert rows["none", 16]["exact_match"] >= 0.95
    # the same 256 test examples as training's own end-of-run test
    assert rows["none", 16]["teacher_forced_exact"] == trained["test/exact_match"]
    assert rows["none", 32]["answer_loss"] > rows["none", 16]["answer_loss"]
    assert rows["linear", 32]["rope_factor"] == 2.0
    assert "32" in result.stdout
