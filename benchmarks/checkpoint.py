"""The training step that writes ``last.ckpt``, against an ordinary step: synchronous and background saves.

The model is nanoGPT's ``shakespeare_char`` recipe (6 layers, 6 heads, d 384, block 256, 65 characters:
10.7 M parameters), trained with fused AdamW, so the checkpoint (weights and both moments) is about
130 MB. A step is forward, backward and the optimizer update on a batch of the recipe's windows; a
saving step adds what ``LastCheckpoint`` does on the training thread: the checkpoint written through
``AtomicCheckpointIO`` (temporary file, fsync, rename; ``checkpoint.async_save=false``) or handed to
``BackgroundCheckpointIO`` (a CPU copy, then a write on its thread; the default). Each round times an
ordinary step, a synchronous saving step, then a background saving step and the step after it (the
writer still busy); the write is then waited for, untimed, so that rounds do not overlap.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from attnlab.models import build_model
from attnlab.schema.model import GPTConfig
from attnlab.training.callbacks import AtomicCheckpointIO
from attnlab.training.checkpoint_io import BackgroundCheckpointIO
from benchmarks.common import Row, Settings, spread

SECTION = "checkpoint"
TARGET = 2.0  # the saving step's time ÷ an ordinary step's, at most
RECIPE = GPTConfig(n_layers=6, n_heads=6, d_model=384, vocab_size=65, max_seq_len=256)


def trainer_state(batch: int) -> tuple[Callable[[], None], Callable[[], dict]]:
    """One optimizer step of the recipe's model, and its checkpoint (as Lightning's holds it: live tensors)."""
    model = build_model(RECIPE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    ids = torch.randint(RECIPE.vocab_size, (batch, RECIPE.max_seq_len + 1))

    def step() -> None:
        logits = model(ids[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, lambda: {"state_dict": model.state_dict(), "optimizer_states": [opt.state_dict()]}


def timed(fn: Callable[[], object]) -> float:
    from time import perf_counter

    start = perf_counter()
    fn()
    return perf_counter() - start


def run(settings: Settings) -> list[Row]:
    batch = 1  # a CPU step near a save's cost: the recipe's batch of 64 takes seconds per step here
    step, checkpoint = trainer_state(batch)
    step()  # AdamW's moments exist from here on: the checkpoint has its full size
    sync, background = AtomicCheckpointIO(), BackgroundCheckpointIO()
    times: dict[str, list[float]] = {"ordinary": [], "sync": [], "async": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "last.ckpt"
        for _ in range(settings.pick(6, 3, 1)):
            times["ordinary"].append(timed(step))
            times["sync"].append(timed(lambda: (step(), sync.save_checkpoint(checkpoint(), path))))
            times["async"].append(timed(lambda: (step(), background.save_checkpoint(checkpoint(), path))))
            times["after"].append(timed(step))
            background.teardown()
        size_mb = path.stat().st_size / 1e6
    ratios = {k: [t / o for t, o in zip(times[k], times["ordinary"])] for k in ("sync", "async", "after")}
    low, median, high = spread(ratios["async"])
    step_ms = statistics.median(times["ordinary"]) * 1e3
    config = f"recipe GPT 10.7 M params, batch {batch}×256, {size_mb:.0f} MB checkpoint"
    detail = (
        f"ordinary step {step_ms:.0f} ms; synchronous save step {statistics.median(ratios['sync']):.2f}× "
        f"(+{statistics.median([s - o for s, o in zip(times['sync'], times['ordinary'])]) * 1e3:.0f} ms); "
        f"the step after a background save {statistics.median(ratios['after']):.2f}×"
    )
    return [
        Row(
            SECTION,
            "step that writes last.ckpt ÷ ordinary step (background save)",
            config,
            median,
            low,
            high,
            "×",
            detail,
            TARGET,
            f"≤ {TARGET:g}×",
            higher_is_better=False,
        )
    ]
