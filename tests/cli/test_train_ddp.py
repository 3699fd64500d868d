"""``trainer=ddp_sim``: two CPU processes (gloo) train like one process with the doubled batch, end with
identical weights, write one run directory with one logger run, and report the metrics of one process:
on validation and test splits whose size is odd (65 windows each, shards of 33 and 32: one process
runs a batch more than the other), the val and test metrics to rel 1e-6, and ``train/loss`` as the
loss of the global batch.

The run reads prepared token shards (``data=tokens``, the corpus of test_tokens_everywhere.py, prepared
once per session), so its losses also show each rank reading its own samples of a step's windows
(``data.tokens.TokenBatches``); their test split is the validation windows. One two-process run serves
every check (a process contract: Lightning starts its second rank as a new interpreter, as for a user);
the one-process reference trains in the test's own process. The model holds one layer of each mixer
(softmax, latent and differential attention, gated DeltaNet: test_train_mixers_ranks.py's ``MIXERS``,
whose FSDP2 run is there) and clips its gradients, so a mixer whose gradient missed a rank changes
the steps."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from test_train_mixers_ranks import MIXERS
from test_train_tokens import prepared_corpus
from train_cli import check, cli, csv_rows, csv_series, train_in_process, wandb_run

pytestmark = pytest.mark.slow
REL = 1e-6
STEPS = 8
ARGS = [
    "data=tokens",
    "data.val_windows=65",  # an odd count: shards of 33 and 32, 3 and 2 batches of 16
    "model=gpt-tiny",
    *MIXERS,
    "data.seq_len=32",
    f"trainer.max_steps={STEPS}",
    "trainer.val_every_n_steps=4",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "sample.max_new_tokens=0",
]


def validation_windows(shards: Path) -> int:
    """How many non-overlapping windows of ``data.seq_len`` + 1 tokens the validation shards hold."""
    from attnlab.data.shards import token_folder

    return sum((len(shard) - 33) // 32 + 1 for shard in token_folder(shards).open("val") if len(shard) >= 33)


def val_metrics(run: Path, step: int) -> dict[str, float]:
    """The ``val/*`` values logged at ``step`` in the run's CSV log."""
    (row,) = [r for r in csv_rows(run) if r["step"] == str(step) and r.get("val/loss")]
    return {k: float(v) for k, v in row.items() if k.startswith("val/") and v}


def final_test_metrics(run: Path) -> dict[str, float]:
    return json.loads((run / "test_metrics.json").read_text())["metrics"]


@pytest.mark.process_contract("ranks")
def test_two_processes_train_as_one_with_the_doubled_batch_into_one_run(
    built_once: Callable[..., Path], tmp_path: Path
) -> None:
    shards = built_once("tokens-everywhere-corpus", prepared_corpus) / "shards"
    assert validation_windows(shards) > 65  # data.val_windows takes 65 of them
    corpus = f"data.path={shards}"
    ddp_args = [*ARGS, corpus, "logger=many", "trainer=ddp_sim", "data.batch_size=16", "run_dir=ddp"]
    result = check(cli(ddp_args, tmp_path, timeout=600))
    assert "sync_dist" not in result.stdout + result.stderr  # no rank logs an epoch value unsynchronised
    single = tmp_path / "single"
    train_in_process([*ARGS, corpus, "logger=csv", "data.batch_size=32"], single)
    ddp = tmp_path / "ddp"

    # one run directory, one logger run, one log
    made = sorted(p.name for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert made == ["ddp", "single"]  # no outputs/ of a rank that chose its own directory
    assert len(list((ddp / "wandb").glob("offline-run-*"))) == 1
    assert wandb_run(ddp)["run_id"]
    assert sorted(p.name for p in ddp.glob("*.log")) == ["train.log"]
    assert len(list((ddp / "tensorboard").glob("events.out.tfevents.*"))) >= 1
    # both ranks end with identical weights
    (line,) = [x for x in (ddp / "train.log").read_text().splitlines() if "weights sha256 by rank" in x]
    digests = re.findall(r"\b[0-9a-f]{16}\b", line)
    assert len(digests) == 2 and digests[0] == digests[1]
    # the metrics of one process: train/loss of the global batch, val and test on odd splits
    ddp_train, single_train = csv_series(ddp, "train/loss"), csv_series(single, "train/loss")
    assert sorted(ddp_train) == list(range(STEPS))
    assert ddp_train == pytest.approx(single_train, rel=REL, abs=0)
    assert abs(single_train[STEPS - 1] - single_train[0]) > 1e-3  # the steps moved the weights
    assert sorted(csv_series(ddp, "val/loss")) == sorted(csv_series(single, "val/loss")) == [4, 8]
    for step in (4, STEPS):
        ddp_val, single_val = val_metrics(ddp, step), val_metrics(single, step)
        assert set(ddp_val) == {"val/loss", "val/ppl", "val/bpb"}
        assert ddp_val == pytest.approx(single_val, rel=REL, abs=0), step
    ddp_test, single_test = final_test_metrics(ddp), final_test_metrics(single)
    assert set(ddp_test) == {"test/loss", "test/ppl", "test/bpb"}
    assert ddp_test == pytest.approx(single_test, rel=REL, abs=0)
