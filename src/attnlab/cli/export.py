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

from omegaconf import DictConfig

from attnlab.cli.hydra.app import run_hydra
from attnlab.run.bad_input import user_errors_as_one_line
from attnlab.run.exporting import check_paths, export_checkpoint
from attnlab.schema.commands import ExportCommand
from attnlab.schema.load import to_object


def main() -> None:
    """Console script ``attnlab-export`` (also ``python -m attnlab.cli.export``)."""
    run_hydra(export_job, "export")


def export_job(config: DictConfig) -> None:
    """The Hydra task: write the directory and print where it is and what it holds."""
    with user_errors_as_one_line():
        cmd: ExportCommand = to_object(config)
        out = check_paths(cmd)
        print(export_checkpoint(Path(cmd.ckpt_path), out))


if __name__ == "__main__":
    main()
