"""Training on token shards (``data=tokens``): a run killed with SIGKILL and resumed with
``ckpt_path=last`` logs the uninterrupted run's losses; nanoGPT's raw ``train.bin`` trains; a preset
whose folder was never prepared says, in one line, the command that prepares it. The commands run in
this process (``command_here``) but the killed run, a process of its own. Two data-parallel processes
reading their own samples of the shards' windows is test_train_ddp.py's (its run reads token shards)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from in_process import restored
from train_cli import check, command_here, csv_series, start_and_kill_after_first_checkpoint

from attnlab.data.prepare import PrepareSettings, prepare
from attnlab.data.shards import token_folder
from token_corpus import documents, write_jsonl, write_tokenizer

pytestmark = pytest.mark.slow
STEPS = 10
ARGS = [
    "data=tokens",
    "data.seq_len=32",
    "data.batch_size=8",
    "model=gpt-tiny",
    "model.dropout=0.1",
    "logger=csv",
    f"trainer.max_steps={STEPS}",
    "trainer.val_every_n_steps=4",
    "checkpoint.every_n_steps=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "optim.warmup_steps=2",
    "sample.max_new_tokens=0",
    "test_after_fit=false",
]


def prepared_corpus(folder: Path) -> Path:
    docs = documents(600)
    write_jsonl(folder / "docs.jsonl", docs)
    write_tokenizer(folder / "tokenizer.json", docs)
    settings = PrepareSettings(
        out=str(folder / "shards"),
        inputs=[str(folder / "docs.jsonl")],
        tokenizer=str(folder / "tokenizer.json"),
        shard_tokens=20_000,
        val_every=20,
        workers=1,
        progress=False,
    )
    prepare(settings, say=lambda line: None)
    return folder / "shards"


def train_here(args: list[str], cwd: Path) -> None:
    """attnlab-train ``args`` in this process, in ``cwd``; it must succeed."""
    with restored():
        check(command_here(args, cwd))


@pytest.fixture(scope="module")
def runs(built_once: Callable[..., Path]) -> dict[str, Path | int]:
    def full_killed_and_resumed(cwd: Path) -> None:
        """The uninterrupted run and the resume in this process; the killed run a process of its own
        (forked from the preloaded fork server)."""
        args = [*ARGS, f"data.path={prepared_corpus(cwd)}"]
        train_here([*args, "run_dir=full"], cwd)
        killed_at = start_and_kill_after_first_checkpoint(args, cwd, cwd / "killed")
        train_here([*args, "run_dir=killed", "ckpt_path=last"], cwd)
        (cwd / "killed_at").write_text(str(killed_at))

    cwd = built_once("tokens-resume", full_killed_and_resumed)
    return {"full": cwd / "full", "killed": cwd / "killed", "step": int((cwd / "killed_at").read_text())}


@pytest.mark.process_contract("kills")
def test_a_run_killed_and_resumed_logs_the_uninterrupted_losses(runs: dict) -> None:
    assert 0 < runs["step"] < STEPS
    resumed_csv = max((runs["killed"] / "csv").glob("resumed-*"))
    full, resumed = csv_series(runs["full"], "train/loss"), csv_series(resumed_csv, "train/loss")
    assert sorted(resumed) == list(range(runs["step"], STEPS))
    assert resumed == {step: full[step] for step in resumed}  # bit for bit
    full_val, resumed_val = csv_series(runs["full"], "val/loss"), csv_series(resumed_csv, "val/loss")
    assert resumed_val == {step: full_val[step] for step in resumed_val} and resumed_val
    assert csv_series(runs["full"], "val/bpb")  # bits per byte, from the tokenizer's bytes per token


def test_nanogpt_train_bin_trains(tmp_path: Path) -> None:
    """Tokens as nanoGPT's prepare.py writes them: each document then end-of-text, uint16, no header."""
    shards = token_folder(prepared_corpus(tmp_path))
    tokens = np.concatenate(shards.open("train"))
    eot = int(tokens[0])
    as_nanogpt = np.concatenate([tokens[1:], [eot]]).astype(np.uint16)  # the end-of-text after each document
    nanogpt = tmp_path / "nanogpt"
    nanogpt.mkdir()
    as_nanogpt.tofile(nanogpt / "train.bin")
    np.concatenate(shards.open("val")).astype(np.uint16).tofile(nanogpt / "val.bin")
    args = [
        *ARGS,
        f"data.path={nanogpt}",
        f"data.tokenizer={tmp_path / 'tokenizer.json'}",
        "trainer.max_steps=3",
    ]
    train_here([*args, "run_dir=run"], tmp_path)
    assert sorted(csv_series(tmp_path / "run", "train/loss")) == [0, 1, 2]
    assert (tmp_path / "run" / "tokenizer.json").read_bytes() == (tmp_path / "tokenizer.json").read_bytes()


def test_a_preset_never_prepared_names_the_command_that_prepares_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["data=fineweb_edu", "model=gpt-tiny", "trainer.max_steps=1"]
    result = command_here(args, tmp_path, monkeypatch, capsys)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: data.path='data/fineweb_edu': no such folder of token shards; prepare it with: attnlab-prepare "
        "--hf HuggingFaceFW/fineweb-edu --hf-config sample-10BT --streaming --tokenizer gpt2 --out "
        "data/fineweb_edu (needs ~20 GB of disk and the network)"
    )
