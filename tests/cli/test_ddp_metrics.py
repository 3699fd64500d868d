"""Metrics that do not depend on the number of processes: on splits whose size is odd, two CPU
processes (``trainer=ddp_sim``, gloo) report the val and test metrics of one process to rel 1e-6, and
log ``train/loss`` as the loss of the global batch.

The causal LM is compared with one process training on the doubled batch (their training is identical;
the one process trains in the test's own). The classifier and seq2seq are compared with ``attnlab-eval``
(its ``main``, in the test's process) of the two-process run's checkpoint, the same weights: a token-mean loss (seq2seq) trains differently on two processes, as DDP
averages the ranks' gradients unweighted.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from train_cli import TEST_PRESETS, check, cli, csv_rows, csv_series, run_command, train_in_process

pytestmark = pytest.mark.slow
REL = 1e-6
# attnlab-eval takes the first two (its trainer has no logging interval)
COMMON = ["logger=csv", "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1"]
# The commands, on a corpus small enough for seconds of evaluation.
GPT = [*COMMON, "model=gpt-tiny", "trainer.max_steps=8", "trainer.val_every_n_steps=8", "data.seq_len=32"]
GPT += ["sample.max_new_tokens=0"]  # the word salad has no "T" for the default prompt
GPT_STEPS = 8
# 33 validation and 35 test samples (uneven shards of 17 and 16, 18 and 17); a learning rate at which
# 20 steps already make seq2seq decode text that shares characters with the references (chrF > 0).
GENERATED = [*COMMON, TEST_PRESETS, "data.num_val=33", "data.num_test=35", "data.batch_size=8"]
GENERATED += ["optim.lr=1e-2", "optim.warmup_steps=0", "optim.schedule=constant"]
GENERATED += ["trainer.max_steps=20", "trainer.val_every_n_steps=20"]
GENERATED_STEPS = 20
CORPUS_CHARS = 40_660  # val and test: int(0.05 * 40660) = 2033 characters each, 63 windows of 32 + 1


def write_corpus(path: Path) -> Path:
    """Seeded word salad whose validation and test splits hold 63 windows each (an odd count)."""
    words = ("the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be")
    rng = random.Random(0)
    text = ""
    while len(text) < CORPUS_CHARS:
        text += " ".join(rng.choice(words) for _ in range(12)) + ".\n"
    path.write_text(text[:CORPUS_CHARS], encoding="utf-8")
    return path


def run_dir(cwd: Path) -> Path:
    (found,) = cwd.glob("outputs/*/*")
    return found


def final_test_metrics(run: Path) -> dict[str, float]:
    return json.loads((run / "test_metrics.json").read_text())["metrics"]


def val_metrics(run: Path, step: int) -> dict[str, float]:
    """The ``val/*`` values logged at ``step`` in the run's CSV log."""
    (row,) = [r for r in csv_rows(run) if r["step"] == str(step) and r.get("val/loss")]
    return {k: float(v) for k, v in row.items() if k.startswith("val/") and v}


def test_causal_lm_on_two_processes_reports_one_process_metrics(tmp_path: Path) -> None:
    corpus = f"data.path={write_corpus(tmp_path / 'corpus.txt')}"
    ddp_cwd, single = tmp_path / "ddp", tmp_path / "single"
    ddp_cwd.mkdir()
    check(
        cli(
            [*GPT, corpus, "trainer=ddp_sim", "data.batch_size=16"],
            ddp_cwd,
            timeout=600,
        )
    )
    train_in_process([*GPT, corpus, "data.batch_size=32"], single)
    ddp = run_dir(ddp_cwd)

    ddp_train, single_train = csv_series(ddp, "train/loss"), csv_series(single, "train/loss")
    assert sorted(ddp_train) == list(range(GPT_STEPS))
    assert ddp_train == pytest.approx(single_train, rel=REL, abs=0)
    ddp_val, single_val = val_metrics(ddp, GPT_STEPS), val_metrics(single, GPT_STEPS)
    assert set(ddp_val) == {"val/loss", "val/ppl", "val/bpb"}
    assert ddp_val == pytest.approx(single_val, rel=REL, abs=0)
    ddp_test, single_test = final_test_metrics(ddp), final_test_metrics(single)
    assert set(ddp_test) == {"test/loss", "test/ppl", "test/bpb"}
    assert ddp_test == pytest.approx(single_test, rel=REL, abs=0)


@pytest.mark.parametrize("family", ["bert", "seq2seq"])
def test_classifier_and_seq2seq_on_two_processes_report_one_process_metrics(
    tmp_path: Path, family: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from attnlab.cli.eval import main as evaluate

    check(
        cli(
            [*GENERATED, f"experiment=tiny_{family}", "trainer=ddp_sim"],
            tmp_path,
            timeout=600,
        )
    )
    run = run_dir(tmp_path)
    ckpt = json.loads((run / "test_metrics.json").read_text())["ckpt_path"]
    assert ckpt.endswith(f"best-step{GENERATED_STEPS:06d}.ckpt")
    # One process: both splits of the checkpoint, in one attnlab-eval multirun.
    monkeypatch.chdir(tmp_path)
    sweep = ["-m", f"ckpt_path={ckpt}", "split=val,test", *COMMON[:2]]
    assert run_command(evaluate, sweep, monkeypatch, capsys) == 0, capsys.readouterr().err

    names = {"bert": {"loss", "acc", "f1"}, "seq2seq": {"loss", "ppl", "acc", "exact_match", "bleu", "chrf"}}
    one = {
        r["split"]: r["metrics"]
        for r in map(json.loads, map(Path.read_text, run.glob("eval/*/*/metrics.json")))
    }
    two = {"val": val_metrics(run, GENERATED_STEPS), "test": final_test_metrics(run)}
    for split in ("val", "test"):
        assert set(two[split]) == {f"{split}/{name}" for name in names[family]}, split
        assert two[split] == pytest.approx(one[split], rel=REL, abs=0), split
    if family == "seq2seq":  # decoded text to score, not two empty corpora:
        assert val_metrics(run, GENERATED_STEPS)["val/chrf"] > 0 < final_test_metrics(run)["test/chrf"]
