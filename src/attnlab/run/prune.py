"""``attnlab-compress method=prune_heads``: a checkpoint with its least important attention heads removed.

    attnlab-compress ckpt_path=<run>/checkpoints/last.ckpt method=prune_heads fraction=0.25
    attnlab-compress ckpt_path=... method=prune_heads fraction=0.5 finetune_steps=200 out=pruned.ckpt

1. Head importance (Michel et al. 2019, ``attnlab.explain.head_importance``, as attnlab-explain
   computes it) over the first ``importance_batches`` validation batches of the run's own data;
2. the least important ``round(fraction * heads)`` heads removed (``attnlab.compress.prune``: whole
   key/value groups, at least one head kept in every attention module);
3. with ``finetune_steps`` > 0, training on the run's training data for that many steps: the run's
   task and optimiser, at a constant learning rate (the run's times ``optim.min_lr_ratio``, where its
   cosine schedule ended, no warm-up), the run's seed and gradient clipping;
4. the checkpoint written whole or not at all: the model config with ``model.kept_heads``, so every
   command loads it like a checkpoint of attnlab-train, and an ``attnlab_pruning`` record.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from attnlab.schema.commands import CompressCommand
from attnlab.training.resume import RUN_KEY  # the run's config, whose model becomes the pruned one


def prune_loaded(cmd: CompressCommand, loaded: Any, checkpoint: dict) -> tuple[dict, str]:
    """``checkpoint`` (the entries of ``loaded``'s file that inference reads) with the heads pruned,
    and what was removed."""
    from attnlab.checkpoint import run_datamodule
    from attnlab.compress import PRUNING_KEY, heads_to_keep, prune_heads, total_heads
    from attnlab.explain import head_importance
    from attnlab.schema.load import plain

    datamodule = run_datamodule(loaded)
    model = loaded.model
    scores = head_importance(model, datamodule.val_dataloader(), max_batches=cmd.importance_batches).scores
    loss_before = val_loss(model, datamodule, cmd.importance_batches)
    pruned = prune_heads(model, heads_to_keep(model, scores, cmd.fraction))
    loss_pruned = val_loss(pruned, datamodule, cmd.importance_batches)
    task = finetuned(loaded.task, pruned, datamodule, cmd.finetune_steps, checkpoint)
    loss_after = val_loss(task.model, datamodule, cmd.importance_batches)
    before, after = total_heads(model), total_heads(pruned)
    checkpoint["state_dict"] = task.state_dict()
    checkpoint["hyper_parameters"] = {**checkpoint["hyper_parameters"], "model": plain(pruned.cfg)}
    if isinstance(checkpoint.get(RUN_KEY), dict) and "config" in checkpoint[RUN_KEY]:
        config = checkpoint[RUN_KEY]["config"]
        checkpoint[RUN_KEY] = {**checkpoint[RUN_KEY], "config": {**config, "model": plain(pruned.cfg)}}
    checkpoint[PRUNING_KEY] = {
        "fraction": cmd.fraction,
        "heads_before": before,
        "heads_after": after,
        "importance_batches": cmd.importance_batches,
        "finetune_steps": cmd.finetune_steps,
        "val_loss": {"before": loss_before, "pruned": loss_pruned, "after": loss_after},
    }
    quality = f"val loss over {cmd.importance_batches} batches {loss_before:.4f} -> {loss_pruned:.4f}"
    if cmd.finetune_steps:
        quality += f" -> {loss_after:.4f} after {cmd.finetune_steps} fine-tuning steps"
    return checkpoint, f"prune_heads, {before - after} of {before} heads removed, {quality}"


def val_loss(model: Any, datamodule: Any, batches: int) -> float:
    """The mean loss per example of ``model`` over the first ``batches`` validation batches: the
    quality that pruning trades for size, measured on the batches that chose the heads."""
    import torch

    from attnlab.explain.head_importance import example_losses

    losses = []
    with torch.no_grad():
        for i, batch in enumerate(datamodule.val_dataloader()):
            if i == batches:
                break
            losses.append(example_losses(model.eval(), batch))
    return float(torch.cat(losses).mean())


def finetuned(task: Any, pruned: Any, datamodule: Any, steps: int, checkpoint: dict) -> Any:
    """The task module of the run with ``pruned`` as its model, trained ``steps`` steps (none: as is)."""
    import pytorch_lightning as pl

    from attnlab.schema.checks import validate_saved
    from attnlab.schema.load import plain

    task.model = pruned
    if steps == 0:
        return task
    run = validate_saved(checkpoint[RUN_KEY]["config"])
    pl.seed_everything(run.seed, workers=True, verbose=False)
    tuned = type(task)(
        model=pruned,
        task=task.hparams["task"],
        optim=plain(finetune_optim(task.optim_cfg)),
        max_steps=steps,
        tokenizer=task.tokenizer,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        gradient_clip_val=run.trainer.gradient_clip_val,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
    )
    trainer.fit(tuned, datamodule=datamodule)
    return tuned.eval()


def finetune_optim(optim: Any) -> Any:
    """The run's optimiser at a constant learning rate: its peak times ``min_lr_ratio``, no warm-up."""
    lr = {"lr": optim.lr * optim.min_lr_ratio}
    if hasattr(optim, "adamw"):  # Muon's AdamW part has a learning rate of its own
        lr["adamw"] = replace(optim.adamw, lr=optim.adamw.lr * optim.min_lr_ratio)
    return replace(optim, schedule="constant", warmup_steps=0, max_steps=None, **lr)
