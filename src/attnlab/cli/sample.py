"""``attnlab-sample``: predictions of a trained checkpoint from the command line.

    attnlab-sample ckpt_path=outputs/.../checkpoints/last.ckpt prompt="ROMEO:" num_samples=3 top_k=40
    attnlab-sample ckpt_path=... prompts='[To be, Friends]' temperature=0    # a batch, greedy
    attnlab-sample ckpt_path=<seq2seq run> prompt="march 3, 2021" num_beams=4 n_best=2
    attnlab-sample ckpt_path=<bert mlm run> prompt="'the <mask> sat'"      # fill-mask
    attnlab-sample ckpt_path=<vit run> image=digit.png
    attnlab-sample ckpt_path=... prompt="ROMEO:" model.attn_backend=flex      # FlexAttention kernel

The family of the checkpoint decides what is done (``attnlab.run.families``, conf/sample.yaml); the tokenizer is the one
saved with the checkpoint. Hydra's override grammar wants text with commas, brackets or ``<>``
quoted inside the shell's quotes: ``prompt="'To be, or not'"``. The model's keys that hold no weights
may change as in attnlab-eval (``model.attn_backend``, ``model.attn_window``, ``model.pos.rope_*``).
"""

from __future__ import annotations

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from attnlab.cli.hydra.app import run_hydra
from attnlab.run.bad_input import user_errors_as_one_line
from attnlab.run.eval_data import model_changes
from attnlab.run.sampling import sample_checkpoint
from attnlab.schema.commands import SampleCommand
from attnlab.schema.load import to_object


def main() -> None:
    """Console script ``attnlab-sample`` (also ``python -m attnlab.sample``)."""
    run_hydra(sample_job, "sample")


def sample_job(config: DictConfig) -> None:
    """The Hydra task: print the checkpoint's predictions; bad input ends with one ``error:`` line."""
    with user_errors_as_one_line():
        cmd: SampleCommand = to_object(config)
        cmd.check()
        changes = model_changes(cmd.ckpt_path, list(HydraConfig.get().overrides.task))
        print(sample_checkpoint(cmd, changes))


if __name__ == "__main__":
    main()
