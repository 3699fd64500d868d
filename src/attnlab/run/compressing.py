"""A checkpoint compressed as ``attnlab-compress`` writes it, in this process: the file to write
checked (``output_path``), then the weights quantized (``attnlab.compress``) or the least important
heads pruned (``attnlab.run.prune``), and the smaller checkpoint written whole or not at all."""

from __future__ import annotations

from pathlib import Path

from attnlab.run.bad_input import check_writable
from attnlab.schema.commands import CompressCommand, CompressMethod
from attnlab.schema.errors import ConfigError
from attnlab.schema.rundir import check_checkpoint_file
from attnlab.training.files import saved_size

# What only resuming training reads: a compressed checkpoint leaves it out.
TRAINING_STATE = ("optimizer_states", "lr_schedulers", "loops", "callbacks")


def output_path(cmd: CompressCommand) -> Path:
    """The file to write (``out``, or ``<method>-<name>`` beside the checkpoint), checked before any
    work: the checkpoint exists, the folder of ``out`` exists, and ``out`` is not the checkpoint."""
    ckpt = Path(cmd.ckpt_path)
    check_checkpoint_file("ckpt_path", cmd.ckpt_path)
    # "int8-last.ckpt", not "last-int8.ckpt": ckpt_path=last resumes the newest last*.ckpt
    out = Path(cmd.out) if cmd.out is not None else ckpt.with_name(f"{cmd.method}-{ckpt.name}")
    if out.is_dir():
        raise ConfigError("out", cmd.out, "is a folder: name the file to write")
    if not out.parent.is_dir():
        raise ConfigError("out", cmd.out, f"its folder {out.parent} does not exist: create it first")
    if out.resolve() == ckpt.resolve():
        raise ConfigError("out", cmd.out, "is the checkpoint to compress: name another file")
    if cmd.out is not None and (out.exists() or out.is_symlink()) and not cmd.overwrite:
        raise out_exists(cmd.out)
    check_writable("out", out)
    return out


def out_exists(out: str) -> ConfigError:
    return ConfigError("out", out, "exists: name a new file, or add overwrite=true to replace it")


def compress_checkpoint(cmd: CompressCommand, out: Path) -> str:
    """Write ``cmd.ckpt_path`` compressed by ``cmd.method`` to ``out``; returns a line saying so. The
    checkpoint is loaded first, so that a file that is not an attnlab checkpoint is one line."""
    ckpt = Path(cmd.ckpt_path)
    if cmd.method == CompressMethod.prune_heads:
        from attnlab.checkpoint import load_checkpoint
        from attnlab.run.prune import prune_loaded

        loaded = load_checkpoint(ckpt)  # with its tokenizer: the run's data is rebuilt
        checkpoint, what = prune_loaded(cmd, loaded, uncompressed_checkpoint(ckpt))
    else:
        checkpoint, what = quantized(ckpt, str(cmd.method))
    return f"{out}: {what}, {write_checkpoint(checkpoint, cmd, out)}"


def quantized(ckpt: Path, method: str) -> tuple[dict, str]:
    """The checkpoint with its model's Linear weights quantized by ``method``, and what was done."""
    from attnlab.checkpoint import load_task_from_checkpoint
    from attnlab.compress import QUANTIZATION_KEY, QUANTIZERS

    task = load_task_from_checkpoint(ckpt)
    checkpoint = uncompressed_checkpoint(ckpt)
    QUANTIZERS[method](task.model)
    checkpoint[QUANTIZATION_KEY] = quantization_record(method)
    checkpoint["state_dict"] = task.state_dict()
    return checkpoint, method


def uncompressed_checkpoint(ckpt: Path) -> dict:
    """The entries of ``ckpt`` that inference reads (not ``TRAINING_STATE``); an int8 checkpoint is
    refused in one line (its int8 weights are compressed once: quantize after any other method)."""
    import torch

    from attnlab.compress import quantization_of

    checkpoint = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)
    done = quantization_of(checkpoint)
    if done is not None:
        raise ConfigError(
            "ckpt_path",
            str(ckpt),
            f"is already compressed ({done['method']}): give a checkpoint of attnlab-train",
        )
    return {key: value for key, value in checkpoint.items() if key not in TRAINING_STATE}


def write_checkpoint(checkpoint: dict, cmd: CompressCommand, out: Path) -> str:
    """Write ``checkpoint`` to ``out`` whole or not at all; returns its size against the uncompressed
    weights (the same entries, its model's weights as trained: what compression saves) and against
    ``ckpt_path`` (which also holds the optimizer's state, so that ratio says more about Adam than about
    compression). Without ``overwrite``, a file another process made at ``out`` meanwhile is kept (one
    line)."""
    from attnlab.training.files import staged_new, torch_save

    overwrite = cmd.overwrite or cmd.out is None
    try:
        with staged_new(out, overwrite, needed=lambda: saved_size(checkpoint)) as tmp:
            torch_save(checkpoint, tmp)  # a full disk: the OSError, not torch's "unexpected pos"
    except FileExistsError:  # another process wrote out between the check and now
        raise out_exists(str(out)) from None
    ckpt = Path(cmd.ckpt_path)
    weights = saved_size(uncompressed_checkpoint(ckpt))
    after, before = out.stat().st_size, ckpt.stat().st_size
    return (
        f"{mib(after)} MiB: {weights / after:.2f}x smaller than the uncompressed weights ({mib(weights)} MiB);"
        f" {ckpt.name} with its training state {mib(before)} MiB"
    )


def mib(size: int) -> str:
    return f"{size / 2**20:.2f}"


def quantization_record(method: str) -> dict[str, str]:
    """What the checkpoint says about its compression (plain data, its own entry)."""
    from importlib.metadata import version

    return {
        "method": method,
        "weights": "nn.Linear: int8, one scale per output channel",
        "torchao": version("torchao"),
    }
