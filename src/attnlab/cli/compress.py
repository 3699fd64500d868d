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
from attnlab.run.bad_input import user_errors_as_one_line
from attnlab.run.compressing import compress_checkpoint, output_path
from attnlab.schema.commands import CompressCommand
from attnlab.schema.load import to_object


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


if __name__ == "__main__":
    main()
