"""``attnlab-consolidate``: a sharded checkpoint (``trainer.strategy=fsdp2 checkpoint.sharded=true``, a
directory of every process's shards) written as one ordinary checkpoint file, for the commands that
read weights (attnlab-eval, -sample, -compress, -explain). Resuming reads the sharded one itself.

    attnlab-consolidate outputs/run/checkpoints/last.ckpt            # -> outputs/run/checkpoints/whole-last.ckpt
    attnlab-consolidate outputs/run/checkpoints/best-step000100.ckpt --out best.ckpt
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from attnlab.schema.rundir import is_sharded_checkpoint
from attnlab.training.files import disk_full_in_one_line
from attnlab.training.signals import interrupted_in_one_line


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser whose errors are the house's one ``error:`` line (status 2), the usage in it."""

    def error(self, message: str) -> NoReturn:
        usage = self.format_usage().strip().removeprefix("usage: ")
        print(f"error: {message} (usage: {usage})", file=sys.stderr)
        sys.exit(2)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="attnlab-consolidate",
        description="Write a sharded checkpoint of attnlab-train (fsdp2) as one checkpoint file.",
    )
    p.add_argument("checkpoint", type=Path, help="the sharded checkpoint (its directory, or last.ckpt)")
    p.add_argument("--out", type=Path, help="the file to write (default: whole-<name> beside it)")
    return p


def main(argv: list[str] | None = None) -> None:
    """Console script ``attnlab-consolidate`` (also ``python -m attnlab.cli.consolidate``); a signal
    ends it in one line, a full disk too (naming the file)."""
    with interrupted_in_one_line("consolidate"), disk_full_in_one_line():
        consolidate_command(argv)


def consolidate_command(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if not args.checkpoint.exists():
        print(
            f"error: {args.checkpoint}: does not exist: give a sharded checkpoint's directory",
            file=sys.stderr,
        )
        sys.exit(2)
    if not is_sharded_checkpoint(args.checkpoint):
        print(
            f"error: {args.checkpoint}: not a sharded checkpoint (a directory with .metadata and meta.pt, "
            "written under trainer.strategy=fsdp2 checkpoint.sharded=true)",
            file=sys.stderr,
        )
        sys.exit(2)
    from attnlab.training.sharded import consolidate

    print(consolidate(args.checkpoint, args.out))


if __name__ == "__main__":
    main()
