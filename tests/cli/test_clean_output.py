"""A researcher sees the config, the progress and the results: no command prints Lightning's advertising
tips, the deprecation notices of Lightning, wandb and torch's pytree, torchao's failed CUDA-only
libraries, or the "`weights_only` was not set" line that reads like an unsafe checkpoint load."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_cli import TEXT, TINY, check, cli

pytestmark = pytest.mark.slow
CLUTTER = (
    "Tip:",  # Lightning: litlogger, litmodels
    "litlogger",
    "`weights_only` was not set",
    "is deprecated",  # Lightning's pytree helper on recent torch; torch's register_constant on torchao's enums
    "register_constant",
    "anonymous setting has no effect",  # wandb, given Lightning's anonymous=None
    "Failed to load",  # torchao's CUDA-only extensions on a CPU build
)


def clutter(output: str) -> list[str]:
    return [line for line in output.splitlines() if any(c in line for c in CLUTTER)]


def test_train_eval_compress_and_sample_print_no_tips_or_deprecations(tmp_path: Path) -> None:
    """One short run with the default logger (wandb, offline), its evaluation, its int8 copy (torchao)
    and a sample from that copy."""
    train = check(cli([*TINY, *TEXT, "model=gpt-tiny", "run_dir=run"], tmp_path, fresh_interpreter=True))
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    evaluation = check(
        cli([f"ckpt_path={ckpt}", "limit_batches=1"], tmp_path, command="eval", fresh_interpreter=True)
    )
    compress = check(
        cli([f"ckpt_path={ckpt}", "out=int8.ckpt"], tmp_path, command="cli.compress", fresh_interpreter=True)
    )
    sample = check(
        cli(["ckpt_path=int8.ckpt", "max_new_tokens=4"], tmp_path, command="sample", fresh_interpreter=True)
    )
    outputs = {
        name: result.stdout + result.stderr
        for name, result in [
            ("train", train),
            ("eval", evaluation),
            ("compress", compress),
            ("sample", sample),
        ]
    }
    assert "test/loss=" in outputs["train"] and "test/loss=" in outputs["eval"]  # the results still show
    assert {name: clutter(output) for name, output in outputs.items()} == {name: [] for name in outputs}
