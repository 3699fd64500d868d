"""Metrics that do not depend on the number of processes, for the classifier and seq2seq: on splits
whose size is odd, two CPU processes (``trainer=ddp_sim``, gloo) report the val and test metrics of
one process to rel 1e-6 (the causal LM's: test_train_ddp.py, which compares whole runs).

They are compared with ``attnlab-eval`` (its ``main``, in the test's process) of the two-process run's
checkpoint, the same weights: a token-mean loss (seq2seq) trains differently on two processes, as DDP
averages the ranks' gradients unweighted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from train_cli import TEST_PRESETS, check, cli, csv_rows, run_command

pytestmark = pytest.mark.slow
REL = 1e-6
# attnlab-eval takes the first two (its trainer has no logging interval)
COMMON = ["logger=csv", "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1"]
# 33 validation and 35 test samples (uneven shards of 17 and 16, 18 and 17); a learning rate at which
# 20 steps already make seq2seq decode text that shares characters with the references (chrF > 0).
GENERATED = [*COMMON, TEST_PRESETS, "data.num_val=33", "data.num_test=35", "data.batch_size=8"]
GENERATED += ["optim.lr=1e-2", "optim.warmup_steps=0", "optim.schedule=constant"]
GENERATED += ["trainer.max_steps=20", "trainer.val_every_n_steps=20", "sample.max_new_tokens=0"]
GENERATED_STEPS = 20
NAMES = {"bert": {"loss", "acc", "f1"}, "seq2seq": {"loss", "ppl", "acc", "exact_match", "bleu", "chrf"}}


def final_test_metrics(run: Path) -> dict[str, float]:
    return json.loads((run / "test_metrics.json").read_text())["metrics"]


def val_metrics(run: Path, step: int) -> dict[str, float]:
    """The ``val/*`` values logged at ``step`` in the run's CSV log."""
    (row,) = [r for r in csv_rows(run) if r["step"] == str(step) and r.get("val/loss")]
    return {k: float(v) for k, v in row.items() if k.startswith("val/") and v}


@pytest.mark.process_contract("ranks")
def test_classifier_and_seq2seq_on_two_processes_report_one_process_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnlab.cli.eval import main as evaluate

    for family in NAMES:
        cwd = tmp_path / family
        cwd.mkdir()
        check(
            cli([*GENERATED, f"experiment=tiny_{family}", "trainer=ddp_sim", "run_dir=run"], cwd, timeout=600)
        )
        run = cwd / "run"
        ckpt = json.loads((run / "test_metrics.json").read_text())["ckpt_path"]
        assert ckpt.endswith(f"best-step{GENERATED_STEPS:06d}.ckpt")
        # One process: both splits of the checkpoint, in one attnlab-eval multirun.
        monkeypatch.chdir(cwd)
        sweep = ["-m", f"ckpt_path={ckpt}", "split=val,test", *COMMON[:2]]
        assert run_command(evaluate, sweep, monkeypatch, capsys) == 0, capsys.readouterr().err

        one = {
            r["split"]: r["metrics"]
            for r in map(json.loads, map(Path.read_text, run.glob("eval/*/*/metrics.json")))
        }
        two = {"val": val_metrics(run, GENERATED_STEPS), "test": final_test_metrics(run)}
        for split in ("val", "test"):
            assert set(two[split]) == {f"{split}/{name}" for name in NAMES[family]}, (family, split)
            assert two[split] == pytest.approx(one[split], rel=REL, abs=0), (family, split)
        if family == "seq2seq":  # decoded text to score, not two empty corpora:
            assert two["val"]["val/chrf"] > 0 < two["test"]["test/chrf"]
