"""A checkpoint exported as ``attnlab-export`` writes it, in this process: the paths checked
(``check_paths``), then the model and tokenizer written as a Hugging Face folder (``attnlab.export``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.run.bad_input import check_writable
from attnlab.schema.commands import ExportCommand
from attnlab.schema.errors import ConfigError
from attnlab.schema.rundir import check_checkpoint_file


def check_paths(cmd: ExportCommand) -> Path:
    """``out``, checked before any work: the checkpoint is one file, ``out`` is new and its folder
    exists."""
    check_checkpoint_file("ckpt_path", cmd.ckpt_path)
    out = Path(cmd.out)
    if out.exists():
        raise ConfigError("out", cmd.out, "exists: name a new folder to create")
    if not out.parent.is_dir():
        raise ConfigError("out", cmd.out, f"its folder {out.parent} does not exist: create it first")
    check_writable("out", out)
    return out


def export_checkpoint(ckpt: Path, out: Path) -> str:
    """Write the model and tokenizer of ``ckpt`` to ``out``; returns a line saying what was written.
    The checkpoint is loaded first, so that a file that is not an attnlab checkpoint is one line."""
    import torch

    from attnlab.checkpoint import load_checkpoint
    from attnlab.compress import quantization_of
    from attnlab.export import write_hf

    loaded = load_checkpoint(ckpt)
    done = quantization_of(torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True))
    if done is not None:
        raise ConfigError(
            "ckpt_path",
            str(ckpt),
            f"is compressed ({done['method']}): export the checkpoint of attnlab-train it was made from",
        )
    try:
        cls = write_hf(loaded.model, out, loaded.tokenizer, image_normalisation_of(loaded))
    except Exception as err:
        raise_disk_full(err, out, sum(t.nbytes for t in loaded.model.state_dict().values()))
        raise
    files = ", ".join(sorted(p.name for p in out.iterdir()))
    return f"{out}: {cls} ({files})"


def raise_disk_full(err: Exception, out: Path, weights: int) -> None:
    """A write of the folder that found the disk full (or passed ``ulimit -f``), safetensors' and the
    tokenizer's included, as one DiskFullError naming ``out`` and about the space it needs (its
    ``weights`` bytes); any other error is left to the caller. Nothing is left: ``write_hf`` removes
    its temporary folder."""
    from attnlab.training.files import disk_full, is_disk_full, writer_os_error

    cause = writer_os_error(err)
    if cause is not None and is_disk_full(cause):
        raise disk_full(out, weights, cause.errno) from None


def image_normalisation_of(loaded: Any) -> tuple[Any, Any] | None:
    """The mean and std with which an image model's run normalised its images (its data module is
    rebuilt to read them), for the exported image processor; None for a model of tokens."""
    if loaded.model.input_kind != "images":
        return None
    from attnlab.checkpoint import image_normalisation, run_datamodule

    return image_normalisation(run_datamodule(loaded))
