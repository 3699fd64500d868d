"""Resuming a run: what the checkpoint says about the run it came from, and whether this run continues it."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from attnlab.schema.errors import ConfigError
from attnlab.schema.load import from_format_1, is_format_1, plain
from attnlab.schema.run import RunConfig
from attnlab.schema.rundir import SHARDED_META, is_sharded_checkpoint

RUN_KEY = "attnlab_run"  # the checkpoint entry written by training.callbacks.RunState
# Settings that may change on resume without changing what is computed.
FREE_ON_RESUME = {"data.num_workers", "data.pin_memory", "data.cache_dir"}
COMPARED = ("model", "data", "task", "optim", "seed")


def read_run_state(ckpt_path: str) -> dict[str, Any]:
    """``{"config": ..., "wandb_id": ...}`` stored in an attnlab checkpoint (neither for other
    checkpoints; a sharded checkpoint's directory too), its ``global_step``: the optimizer steps done
    when it was saved, and ``compressed``:
    the method of attnlab-compress that wrote it (None for a checkpoint of attnlab-train)."""
    import torch

    from attnlab.compress import PRUNING_KEY, allow_quantized_tensors, quantization_of
    from attnlab.training.sharded import CONSOLIDATED_KEY

    if is_sharded_checkpoint(ckpt_path):  # its metadata: all but the weights and optimizer states
        meta = torch.load(Path(ckpt_path) / SHARDED_META, map_location="cpu", weights_only=True)
        return {
            **(meta.get(RUN_KEY) or {}),
            "global_step": int(meta.get("global_step", 0)),
            "compressed": None,
        }
    allow_quantized_tensors(ckpt_path)  # a checkpoint of attnlab-compress holds torchao's int8 tensors
    try:
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError:  # torch's message advises weights_only=False: never do that here
        raise ConfigError(
            "ckpt_path",
            ckpt_path,
            "not a checkpoint of attnlab: it holds pickled objects beyond tensors and plain data, "
            "which could run code, so it is not loaded",
        ) from None
    except Exception as err:  # a damaged or foreign file fails in many ways; all mean the same here
        raise ConfigError(
            "ckpt_path", ckpt_path, f"not a readable checkpoint ({type(err).__name__})"
        ) from None
    state = checkpoint.get(RUN_KEY) if isinstance(checkpoint, dict) else None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError("ckpt_path", ckpt_path, "not a Lightning checkpoint written by attnlab-train")
    compressed = (quantization_of(checkpoint) or {}).get("method")
    compressed = compressed or ("prune_heads" if PRUNING_KEY in checkpoint else None)
    compressed = compressed or ("consolidate" if CONSOLIDATED_KEY in checkpoint else None)
    return {**(state or {}), "global_step": int(checkpoint.get("global_step", 0)), "compressed": compressed}


def check_resume(run: RunConfig) -> None:
    """A resumed run must compute what the checkpoint's run computed: same model, data, task, optimiser, seed."""
    if run.ckpt_path is None:
        return
    state = read_run_state(run.ckpt_path)
    if state["compressed"] == "consolidate":
        raise ConfigError(
            "ckpt_path",
            run.ckpt_path,
            "is a sharded checkpoint consolidated by attnlab-consolidate, for inference only (no optimizer "
            "state): resume from the sharded checkpoint itself (ckpt_path=last)",
        )
    if state["compressed"]:
        raise ConfigError(
            "ckpt_path",
            run.ckpt_path,
            f"is a checkpoint of attnlab-compress method={state['compressed']}, for inference only (no "
            "optimizer state): resume from the checkpoint of attnlab-train",
        )
    saved = state.get("config")
    if not saved:
        return
    if is_format_1(saved):
        saved = from_format_1(saved)
    ours = plain(run)
    for group in COMPARED:
        for key, theirs in _flat(saved.get(group), group).items():
            mine = _flat(ours[group], group).get(key)
            if key not in FREE_ON_RESUME and mine != theirs:
                raise ConfigError(
                    key,
                    mine,
                    f"the checkpoint {run.ckpt_path} was trained with {key}={theirs}; resume with "
                    "the same settings (its run directory's config.yaml has them all)",
                )


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for k, v in value.items():
        out.update(_flat(v, f"{prefix}.{k}"))
    return out
