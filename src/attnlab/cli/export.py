"""``attnlab-export``: a trained checkpoint as a Hugging Face directory, that ``transformers`` loads
with its ``Auto*`` classes (``AutoModelForCausalLM``, ``AutoModelForMaskedLM``, ``AutoTokenizer``, and
for a ViT ``AutoImageProcessor``, with the run's image normalisation...).

    attnlab-export ckpt_path=outputs/.../checkpoints/last.ckpt out=exported/gpt
    python -c "from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained('exported/gpt')"

The architecture is the first that holds the model exactly (``attnlab.models.hf.export``); a model
none holds (ALiBi on a seq2seq, a window on BERT, pruned heads) is refused in one line naming the
setting and the nearest architecture, and nothing is written. So is an int8 checkpoint of
attnlab-compress (its weights are no longer the model's) and a sharded one (attnlab-consolidate
writes it as one file first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnlab.cli.hydra.app import run_hydra
from attnlab.run.bad_input import check_writable, user_errors_as_one_line
from attnlab.schema.commands import ExportCommand
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import to_object
from attnlab.schema.rundir import check_checkpoint_file


def main() -> None:
    """Console script ``attnlab-export`` (also ``python -m attnlab.cli.export``)."""
    run_hydra(export_job, "export")


def export_job(config: DictConfig) -> None:
    """The Hydra task: write the directory and print where it is and what it holds."""
    with user_errors_as_one_line():
        cmd: ExportCommand = to_object(config)
        out = check_paths(cmd)
        print(export_checkpoint(Path(cmd.ckpt_path), out))


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


if __name__ == "__main__":
    main()
