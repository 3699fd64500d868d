"""attnlab-compress method=prune_heads end to end on tiny checkpoints of every family: the pruned
checkpoint holds the smaller model and its kept heads, equals the unpruned model with those heads
masked, fine-tunes on request, and attnlab-eval, attnlab-sample (KV cache) and attnlab-explain read
it like any other; bad input is one line and writes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from test_compress import COMMON, RUNS, files_under
from train_cli import compressed_checkpoints, run_command, tiny_checkpoints

pytestmark = pytest.mark.slow  # end to end: trains four tiny runs (about 1 s each), then prunes


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    return tiny_checkpoints(tmp_path_factory, RUNS, COMMON)


@pytest.fixture(scope="module")
def pruned(checkpoint) -> Callable[[str], Path]:
    """``pruned(family)``: that family's checkpoint with half its heads pruned (beside it)."""
    return compressed_checkpoints(checkpoint, "prune_heads", "fraction=0.5", "importance_batches=2")


def masked_logits(ckpt: Path, kept: list[list[int]], batch: dict) -> torch.Tensor:
    from attnlab.blocks import attention_modules
    from attnlab.checkpoint import load_checkpoint
    from attnlab.explain import head_gates

    model = load_checkpoint(ckpt).model
    scales = {
        name: torch.tensor([float(h in heads) for h in range(attn.n_heads)])
        for (name, attn), heads in zip(attention_modules(model).items(), kept)
    }
    with torch.no_grad(), head_gates(model, scales):
        return model.logits(batch)


@pytest.mark.parametrize("family", ["gpt", "bert", "seq2seq", "vit"])
def test_the_pruned_checkpoint_is_the_unpruned_model_with_heads_masked(checkpoint, pruned, family) -> None:
    from attnlab.blocks import attention_modules
    from attnlab.checkpoint import load_checkpoint, run_datamodule

    saved = torch.load(pruned(family), weights_only=True)
    assert saved["attnlab_pruning"]["heads_after"] * 2 == saved["attnlab_pruning"]["heads_before"]
    assert not {"optimizer_states", "lr_schedulers"} & set(saved)
    kept = saved["hyper_parameters"]["model"]["kept_heads"]
    assert saved["attnlab_run"]["config"]["model"]["kept_heads"] == kept
    loaded = load_checkpoint(pruned(family))
    assert [m.n_heads for m in attention_modules(loaded.model).values()] == [len(k) for k in kept]
    batch = next(iter(run_datamodule(loaded).val_dataloader()))
    with torch.no_grad():
        logits = loaded.model.logits(batch)
    torch.testing.assert_close(logits, masked_logits(checkpoint(family), kept, batch), rtol=0, atol=1e-5)


def test_finetuning_trains_the_pruned_model_deterministically(
    checkpoint, pruned, tmp_path, monkeypatch
) -> None:
    from attnlab.cli.compress import main

    states = []
    for name in ("a", "b"):
        args = [
            f"ckpt_path={checkpoint('gpt')}",
            "method=prune_heads",
            "fraction=0.5",
            "importance_batches=2",
        ]
        out = tmp_path / f"{name}.ckpt"
        assert run_command(main, [*args, "finetune_steps=3", f"out={out}"], monkeypatch) == 0
        states.append(torch.load(out, weights_only=True))
    untuned = torch.load(pruned("gpt"), weights_only=True)["state_dict"]
    quality = states[0]["attnlab_pruning"]["val_loss"]  # on the batches that chose the heads
    assert quality["before"] == pytest.approx(unpruned_loss(checkpoint("gpt"), batches=2), abs=1e-6)
    assert quality["after"] != quality["pruned"]  # fine-tuning moved it
    assert states[0]["hyper_parameters"]["model"] == states[1]["hyper_parameters"]["model"]
    assert states[0]["attnlab_pruning"]["finetune_steps"] == 3
    for key in untuned:
        torch.testing.assert_close(states[0]["state_dict"][key], states[1]["state_dict"][key], rtol=0, atol=0)
    assert any(not torch.equal(states[0]["state_dict"][k], v) for k, v in untuned.items())


def unpruned_loss(ckpt: Path, batches: int) -> float:
    """The mean loss per example over the first validation batches, computed here on its own."""
    from attnlab.checkpoint import load_checkpoint, run_datamodule
    from attnlab.explain.head_importance import example_losses

    loaded = load_checkpoint(ckpt)
    with torch.no_grad():
        losses = [
            example_losses(loaded.model.eval(), b)
            for _, b in zip(range(batches), run_datamodule(loaded).val_dataloader())
        ]
    return float(torch.cat(losses).mean())


def test_attnlab_eval_sample_and_explain_read_the_pruned_checkpoint(
    checkpoint, pruned, tmp_path, monkeypatch, capsys
) -> None:
    from hydra.core.config_store import ConfigStore

    from attnlab.cli.eval import main as evaluate
    from attnlab.cli.explain import main as explain
    from attnlab.cli.sample import main as sample
    from attnlab.run.eval_data import CHECKPOINT_DATA

    ckpt = pruned("gpt")
    args = [f"ckpt_path={ckpt}", "logger=none", "trainer.enable_progress_bar=false", "split=val"]
    try:
        assert run_command(evaluate, [*args, "limit_batches=2"], monkeypatch) == 0
    finally:
        for group in ("data", "model"):
            ConfigStore.instance().repo.get(group, {}).pop(f"{CHECKPOINT_DATA}.yaml", None)
    records = [json.loads(p.read_text()) for p in (ckpt.parent.parent / "eval").glob("*/metrics.json")]
    assert [r["ckpt_path"] for r in records] == [str(ckpt.resolve())]
    outputs = []
    for cache in ("true", "false"):
        capsys.readouterr()
        args = [
            f"ckpt_path={ckpt}",
            "prompt=To be",
            "max_new_tokens=12",
            "temperature=0",
            f"use_cache={cache}",
        ]
        assert run_command(sample, args, monkeypatch) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and "To be" in outputs[0]
    args = [f"ckpt_path={ckpt}", "input=To be", f"out_dir={tmp_path / 'out'}", "importance_batches=2"]
    assert run_command(explain, args, monkeypatch) == 0
    table = (tmp_path / "out" / "head_importance.csv").read_text(encoding="utf-8")
    record = torch.load(ckpt, weights_only=True)["attnlab_pruning"]
    assert table.count("nan") == record["heads_before"] - record["heads_after"] > 0  # the pruned heads


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fraction=1.0"], "error: fraction=1.0: the share of heads to remove: a number in [0, 1)"),
        (["fraction=-0.1"], "error: fraction=-0.1: the share of heads to remove: a number in [0, 1)"),
        (["finetune_steps=-1"], "error: finetune_steps=-1: must be 0 or more"),
        (["importance_batches=0"], "error: importance_batches=0: must be at least 1"),
        (["method=prune"], "error: method=prune: choose one of int8, prune_heads"),
        (["ckpt_path={tmp}/no.ckpt"], "error: ckpt_path={tmp}/no.ckpt: no such checkpoint file"),
        (["ckpt_path={tmp}/weights.ckpt"], "error: '{tmp}/weights.ckpt' is not an attnlab checkpoint"),
        (["ckpt_path={int8}"], "error: ckpt_path={int8}: is already compressed (int8)"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    checkpoint, tmp_path, monkeypatch, capsys, args, message
) -> None:
    from attnlab.cli.compress import main

    torch.save({"weight": torch.zeros(2)}, tmp_path / "weights.ckpt")
    int8 = tmp_path / "int8.ckpt"
    assert (
        run_command(main, [f"ckpt_path={checkpoint('gpt')}", "method=int8", f"out={int8}"], monkeypatch) == 0
    )
    names = {"tmp": tmp_path, "int8": int8}
    args = [a.format(**names) for a in args]
    if not any(a.startswith("ckpt_path=") for a in args):
        args.append(f"ckpt_path={checkpoint('gpt')}")
    if not any(a.startswith("method=") for a in args):
        args.append("method=prune_heads")
    before = files_under(tmp_path) | files_under(checkpoint("gpt").parent.parent)
    capsys.readouterr()
    assert run_command(main, args, monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message.format(**names))
    assert files_under(tmp_path) | files_under(checkpoint("gpt").parent.parent) == before


def test_attnlab_train_refuses_to_resume_from_a_pruned_checkpoint(
    pruned, tmp_path, monkeypatch, capsys
) -> None:
    """It holds no optimizer state (and its optimizer would not fit the smaller model): one line."""
    from attnlab.cli.train import main

    run_dir = tmp_path / "resumed"
    args = [*RUNS["gpt"], *COMMON, f"run_dir={run_dir}", f"ckpt_path={pruned('gpt')}"]
    capsys.readouterr()
    assert run_command(main, args, monkeypatch) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: ckpt_path={pruned('gpt')}: is a checkpoint of attnlab-compress method=prune_heads, for "
        "inference only (no optimizer state): resume from the checkpoint of attnlab-train"
    ]
    assert not run_dir.exists()
