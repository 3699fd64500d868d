"""``attnlab-compress``: a smaller checkpoint of a trained one, that attnlab-eval, attnlab-sample and
attnlab-explain read like any other.

    attnlab-compress ckpt_path=outputs/.../checkpoints/last.ckpt method=int8
    attnlab-compress ckpt_path=... method=int8 out=small/gpt-int8.ckpt
    attnlab-compress ckpt_path=... method=prune_heads fraction=0.25 [finetune_steps=200]

int8 quantizes every Linear weight (``attnlab.compress.quantize``); prune_heads removes the least
important attention heads (``attnlab.run.prune``), and the checkpoint's model config says which
heads each attention module kept (``model.kept_heads``).

The new checkpoint holds what those commands read (the model, task and run configs, the tokenizer)
and the compressed weights (``attnlab.compress``), but not what only resuming training needs (the
optimizer's state, the loops', the callbacks'): it is for inference, not for training on. It is
written whole or not at all (``<out>.tmp``, then a rename), as plain data: ``torch.load(...,
weights_only=True)`` reads it once torchao is imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from attnlab.cli.hydra.app import run_hydra
from attnlab.run.bad_input import check_writable, user_errors_as_one_line
from attnlab.schema.commands import CompressCommand, CompressMethod
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import to_object
from attnlab.schema.rundir import check_checkpoint_file
from attnlab.training.files import saved_size

# What only resuming training reads: a compressed checkpoint leaves it out.
TRAINING_STATE = ("optimizer_states", "lr_schedulers", "loops", "callbacks")


def main() -> None:
    """Console script ``attnlab-compress`` (also ``python -m attnlab.cli.compress``)."""
    run_hydra(compress_job, "compress")


def compress_job(config: DictConfig) -> None:
    """The Hydra task: write the compressed checkpoint and print where it is and how large."""
    from attnlab.training.files import disk_full_line, is_disk_full

    with user_errors_as_one_line():
        cmd: CompressCommand = to_object(config)
        cmd.check()
        out = output_path(cmd)
        try:
            print(compress_checkpoint(cmd, out))
        except OSError as err:
            if is_disk_full(err):  # nothing written: the file and the space it needed, in one line
                print(f"error: {disk_full_line(err, out)}", file=sys.stderr)
                sys.exit(1)
            # a folder that cannot be written
            if err.filename is not None and Path(err.filename).parent != out.parent:
                raise
            print(f"error: out={out}: cannot be written ({err.strerror or err})", file=sys.stderr)
            sys.exit(2)


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


if __name__ == "__main__":
    main()
