"""``attnlab-consolidate``: a sharded checkpoint (``trainer.strategy=fsdp2 checkpoint.sharded=true``, a
directory of every process's shards) written as one ordinary checkpoint file, for the commands that
read weights (attnlab-eval, -sample, -compress, -explain). Resuming reads the sharded one itself.

    attnlab-consolidate outputs/run/checkpoints/last.ckpt            # -> outputs/run/checkpoints/whole-last.ckpt
    attnlab-consolidate outputs/run/checkpoints/best-step000100.ckpt --out best.ckpt

``--out`` must be a new file (``--overwrite`` replaces one), never a checkpoint that resuming or the
run's clean-up reads (``last*.ckpt``, ``best-*.ckpt`` beside the sharded checkpoint).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

from attnlab.cli.hydra.one_line_parser import OneLineParser
from attnlab.run.bad_input import check_writable
from attnlab.schema.errors import ConfigError
from attnlab.schema.rundir import LAST, is_sharded_checkpoint
from attnlab.training.files import disk_full_in_one_line, is_disk_full
from attnlab.training.signals import interrupted_in_one_line

RUN_CHECKPOINTS = ("last*.ckpt", "best-*.ckpt")  # what ckpt_path=last and the best-checkpoint clean-up read


def parser() -> OneLineParser:
    p = OneLineParser(
        prog="attnlab-consolidate",
        description="Write a sharded checkpoint of attnlab-train (fsdp2) as one checkpoint file.",
    )
    p.add_argument("checkpoint", type=Path, help="the sharded checkpoint (its directory, or last.ckpt)")
    p.add_argument("--out", type=Path, help="the new file to write (default: whole-<name> beside it)")
    p.add_argument("--overwrite", action="store_true", help="replace --out where it exists")
    return p


def main(argv: list[str] | None = None) -> None:
    """Console script ``attnlab-consolidate`` (also ``python -m attnlab.cli.consolidate``); a signal
    ends it in one line, a full disk too (naming the file)."""
    with interrupted_in_one_line("consolidate"), disk_full_in_one_line():
        consolidate_command(argv)


def consolidate_command(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    out = args.out
    try:
        check_checkpoint(args.checkpoint)
        out = check_out(args.checkpoint, args.out, args.overwrite)
        from attnlab.training.sharded import consolidate

        print(consolidate(args.checkpoint, out, overwrite=args.overwrite or args.out is None))
    except ConfigError as err:
        fail(str(err))
    except FileExistsError:  # another process wrote --out between the check and the write
        fail(str(out_error(out)))
    except OSError as err:  # a folder that cannot be written; a full disk is disk_full_in_one_line's
        if is_disk_full(err):
            raise
        fail(f"--out={out}: cannot be written ({err.strerror or err})")


def fail(line: str) -> NoReturn:
    print(f"error: {line}", file=sys.stderr)
    sys.exit(2)


def check_checkpoint(checkpoint: Path) -> None:
    if not checkpoint.exists():
        raise ConfigError("checkpoint", checkpoint, "does not exist")
    if not is_sharded_checkpoint(checkpoint):
        raise ConfigError(
            "checkpoint",
            checkpoint,
            "not a sharded checkpoint (a directory with .metadata and meta.pt, written under "
            "trainer.strategy=fsdp2 checkpoint.sharded=true)",
        )


def check_out(checkpoint: Path, out: Path | None, overwrite: bool) -> Path:
    """The file to write: ``--out``, new (or ``overwrite``), in a folder that exists, and not a
    checkpoint of the run; by default ``whole-<name>`` beside the checkpoint."""
    from attnlab.training.sharded import consolidated_path

    if out is None:
        out = consolidated_path(checkpoint)
        check_writable("--out", out)
        return out
    runs = checkpoint.absolute().parent
    if out.absolute().parent.resolve() == runs.resolve() and any(out.match(p) for p in RUN_CHECKPOINTS):
        raise ConfigError(
            "--out",
            out,
            f"is where the run keeps its checkpoints ({LAST} resumes, best-*.ckpt are the best): name "
            "another file (the default, whole-<name>, is read by neither)",
        )
    if out.is_dir():
        raise ConfigError("--out", out, "is a folder: name the file to write")
    if not out.parent.is_dir():
        raise ConfigError("--out", out, f"its folder {out.parent} does not exist: create it first")
    if (out.exists() or out.is_symlink()) and not overwrite:
        raise out_error(out)
    check_writable("--out", out)
    return out


def out_error(out: Path) -> ConfigError:
    return ConfigError("--out", out, "exists: name a new file, or add --overwrite to replace it")


if __name__ == "__main__":
    main()
