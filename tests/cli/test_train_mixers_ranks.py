"""Every mixer trains on two CPU processes (gloo) as in one: one GPT whose four layers hold softmax,
latent and differential attention and gated DeltaNet, trained under ``trainer=fsdp2_sim`` (8 windows
per process), logs at every step the training loss of one process trained in this test's own on the
doubled batch, within the tolerance of ``test_train_fsdp2`` (abs 1e-5). One model for all four mixers:
one two-process run instead of four. Gradient clipping is on, so a mixer whose gradient missed a shard
or a rank would change the clipped step too. The same model (``MIXERS``) under ``trainer=ddp_sim`` is
test_train_ddp.py's run, compared with one process to rel 1e-6."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from train_cli import check, cli, train_in_process

pytestmark = pytest.mark.slow
STEPS = 8
# One layer of each mixer; pos=rope for the latent attention's decoupled key and the others' RoPE; a
# chunk of 8 so that gated DeltaNet's 32-token windows run four chunks (the state carried across);
# clipping on. test_train_ddp.py trains this model too.
MIXERS = [
    "pos=rope",
    "model.n_layers=4",
    "model.layout=[attention,latent,differential,deltanet]",
    "model.mixers.chunk=8",
    "trainer.gradient_clip_val=0.5",
    "optim.lr=3e-3",  # large enough that 8 steps move the loss: a wrong step shows
    "optim.warmup_steps=2",
]
ARGS = [
    "model=gpt-tiny",
    *MIXERS,
    "data.seq_len=32",
    f"trainer.max_steps={STEPS}",
    "trainer.val_every_n_steps=8",
    "trainer.limit_val_batches=1",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "sample.max_new_tokens=0",
    "logger=none",
    "test_after_fit=false",
]
TOLERANCE = 1e-5  # test_train_fsdp2's per-step tolerance (abs)


def train_losses(run_dir: Path) -> dict[int, float]:
    """{step: train/loss} from the run's metrics.jsonl (each step once)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "train/loss" in r]
    assert len(steps) == len(set(steps)), f"a step logged twice: {steps}"
    return {r["step"]: r["train/loss"] for r in records if "train/loss" in r}


@pytest.fixture(scope="module")
def one_process(built_once: Callable[..., Path]) -> dict[int, float]:
    """The per-step losses of one process on 16 windows a step."""
    run = built_once(
        "mixers-single", lambda cwd: train_in_process([*ARGS, "data.batch_size=16"], cwd / "run")
    )
    losses = train_losses(run / "run")
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert abs(losses[STEPS] - losses[1]) > 1e-3  # the steps moved the weights
    return losses


@pytest.mark.process_contract("ranks")
def test_every_mixer_trains_sharded_on_two_processes_as_in_one(
    one_process: dict[int, float], tmp_path: Path
) -> None:
    """FSDP2 (one ``fully_shard`` per layer, whatever its mixer) on 8 windows a process."""
    check(cli([*ARGS, "trainer=fsdp2_sim", "data.batch_size=8", "run_dir=run"], tmp_path, timeout=600))
    losses = train_losses(tmp_path / "run")
    assert sorted(losses) == sorted(one_process)
    for step, expected in one_process.items():
        assert losses[step] == pytest.approx(expected, abs=TOLERANCE), f"step {step}"
