"""``trainer=ddp_sim``: two CPU processes (gloo) train like one process with the doubled batch, end with
identical weights, and write one run directory with one logger run."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from train_cli import TEXT, TINY, check, cli, csv_series, wandb_run

pytestmark = pytest.mark.slow
ARGS = [
    *TINY,
    *TEXT,
    "model=gpt-tiny",
    "logger=many",
    "trainer.max_steps=8",
    "trainer.val_every_n_steps=4",
    "trainer.limit_val_batches=4",
    "trainer.limit_test_batches=4",
]


@pytest.fixture(scope="module")
def runs(built_once: Callable[..., Path]) -> tuple[Path, Path]:
    ddp_cwd = built_once(
        "ddp",
        lambda cwd: check(cli([*ARGS, "trainer=ddp_sim", "data.batch_size=8"], cwd, timeout=600)),
    )
    single_cwd = built_once("single", lambda cwd: check(cli([*ARGS, "data.batch_size=16"], cwd)))
    (ddp,) = ddp_cwd.glob("outputs/*/*")
    (single,) = single_cwd.glob("outputs/*/*")
    return ddp, single


def test_one_run_directory_and_one_logger_run(runs: tuple[Path, Path]) -> None:
    ddp, _ = runs
    assert len(list(ddp.parent.parent.glob("*/*"))) == 1
    assert len(list((ddp / "wandb").glob("offline-run-*"))) == 1
    assert wandb_run(ddp)["run_id"]
    assert sorted(p.name for p in ddp.glob("*.log")) == ["train.log"]
    assert len(list((ddp / "tensorboard").glob("events.out.tfevents.*"))) >= 1


def test_both_ranks_end_with_identical_weights(runs: tuple[Path, Path]) -> None:
    ddp, _ = runs
    (line,) = [x for x in (ddp / "train.log").read_text().splitlines() if "weights sha256 by rank" in x]
    digests = re.findall(r"\b[0-9a-f]{16}\b", line)
    assert len(digests) == 2 and digests[0] == digests[1]


def test_loss_matches_one_process_with_the_doubled_batch(runs: tuple[Path, Path]) -> None:
    ddp, single = runs
    ddp_val, single_val = csv_series(ddp, "val/loss"), csv_series(single, "val/loss")
    assert sorted(ddp_val) == sorted(single_val) == [4, 8]  # the optimizer steps they evaluate
    assert ddp_val == pytest.approx(single_val, rel=1e-5)
    ddp_test, single_test = csv_series(ddp, "test/loss"), csv_series(single, "test/loss")
    assert ddp_test == pytest.approx(single_test, rel=1e-5)
