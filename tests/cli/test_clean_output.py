"""A researcher sees the config, the progress and the results: no command prints Lightning's advertising
tips, the deprecation notices of Lightning, wandb and torch's pytree, torchao's failed CUDA-only
libraries, or the "`weights_only` was not set" line that reads like an unsafe checkpoint load."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
from one_interpreter import FRESH_WARNING_FILTERS, commands, forget_quieting, split
from train_cli import TEXT, TINY, check, cli_env

import processes

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


@pytest.mark.process_contract("console")
def test_train_eval_compress_and_sample_print_no_tips_or_deprecations(tmp_path: Path) -> None:
    """One short run with the default logger (wandb, offline), its evaluation, its int8 copy (torchao)
    and a sample from that copy, one after another in one new interpreter (``one_interpreter``: every
    warning that any of them prints, on import or while running, shows under the first that prints it)."""
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    commands = [
        ["train", *TINY, *TEXT, "model=gpt-tiny", "run_dir=run"],
        ["eval", f"ckpt_path={ckpt}", "limit_batches=1"],
        ["cli.compress", f"ckpt_path={ckpt}", "out=int8.ckpt"],
        ["sample", "ckpt_path=int8.ckpt", "max_new_tokens=4"],
    ]
    argv = [arg for command in commands for arg in ["--", *command]]
    result = processes.run(
        processes.python_module("one_interpreter", argv), tmp_path, cli_env(tmp_path), timeout=600
    )
    check(result)
    stdout, stderr = split(result.stdout), split(result.stderr)
    outputs = {name: stdout.get(name, "") + stderr.get(name, "") for name in {*stdout, *stderr}}
    assert set(outputs) == {"", *(command[0] for command in commands)}  # each command ran
    assert "test/loss=" in outputs["train"] and "test/loss=" in outputs["eval"]  # the results still show
    assert "int8" in outputs["cli.compress"] and outputs["sample"].strip()
    assert {name: clutter(output) for name, output in outputs.items()} == {name: [] for name in outputs}


def test_one_interpreter_splits_the_commands_and_undoes_their_quieting() -> None:
    """The helper above: each command's arguments and output, and no filter of an earlier command left."""
    assert commands(["--", "train", "a=1", "--", "eval", "b=2", "c=3"]) == [
        ("train", ["a=1"]),
        ("eval", ["b=2", "c=3"]),
    ]
    printed = "early\n==> train\nx\ny\n==> eval\nz\n"
    assert split(printed) == {"": "\nearly", "train": "x\ny", "eval": "z\n"}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "is deprecated")
        logger = logging.getLogger("pytorch_lightning")
        logger.addFilter(logging.Filter("nothing"))
        forget_quieting()
        assert warnings.filters == FRESH_WARNING_FILTERS and logger.filters == []
