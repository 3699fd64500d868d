"""``attnlab-prepare``: tokenise a corpus once into memory-mapped shards that ``data=tokens`` trains on.

    attnlab-prepare corpus/*.jsonl --tokenizer tokenizer.json --out data/mine
    attnlab-prepare books/ --bpe-vocab-size 32768 --out data/books       # a BPE trained on a sample
    attnlab-prepare --hf HuggingFaceFW/fineweb-edu --hf-config sample-10BT --streaming \\
        --tokenizer gpt2 --out data/fineweb_edu
    attnlab-train data=tokens data.path=data/mine

Paths and a few settings, not a run's config: options in argparse's style, as ``attnlab-report``'s.
A killed or interrupted prepare continues where it stopped when the same command is run again.
"""

from __future__ import annotations

import argparse
import sys

from attnlab.data.prepare import PrepareSettings, prepare
from attnlab.training.signals import interrupted_in_one_line

DEFAULTS = PrepareSettings(out="")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attnlab-prepare",
        description="Tokenise text, JSONL, parquet or a Hugging Face dataset into token shards (data=tokens).",
    )
    p.add_argument("inputs", nargs="*", help="text, JSONL or parquet files, or folders of them")
    p.add_argument("--out", required=True, help="the folder of shards, manifest.json and tokenizer.json")
    p.add_argument("--text-column", default=DEFAULTS.text_column, help="of JSONL, parquet and datasets")
    p.add_argument(
        "--tokenizer", help="a tokenizer.json (or a folder holding one), or a hub name when online"
    )
    p.add_argument(
        "--bpe-vocab-size", type=int, help="without --tokenizer: train a byte-level BPE of this size"
    )
    p.add_argument(
        "--bpe-sample-bytes", type=int, default=DEFAULTS.bpe_sample_bytes, help="text to train it on"
    )
    p.add_argument(
        "--hf",
        dest="hf_name",
        help="a Hugging Face dataset instead of inputs (json + --hf-data-files: local)",
    )
    p.add_argument("--hf-config", help="the dataset's configuration, e.g. sample-10BT")
    p.add_argument("--hf-data-files", help="data_files of the generic builders (json, parquet, text)")
    p.add_argument("--hf-split", default=DEFAULTS.hf_split)
    p.add_argument("--streaming", action="store_true", help="stream the dataset: nothing is downloaded whole")
    p.add_argument("--shard-tokens", type=int, default=DEFAULTS.shard_tokens, help="tokens per shard")
    p.add_argument(
        "--val-every", type=int, default=DEFAULTS.val_every, help="every Nth document is validation"
    )
    p.add_argument("--workers", type=int, default=DEFAULTS.workers, help="tokenising processes")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress line")
    return p


def settings_of(args: argparse.Namespace, p: argparse.ArgumentParser) -> PrepareSettings:
    """The settings, or ``p.error`` (one line, exit 2) for a combination that cannot work."""
    if bool(args.inputs) == bool(args.hf_name):
        p.error("give input files or folders, or --hf NAME (one of them)")
    if bool(args.tokenizer) == bool(args.bpe_vocab_size):
        p.error("give --tokenizer (a tokenizer.json) or --bpe-vocab-size (train one), one of them")
    if args.bpe_vocab_size is not None and args.bpe_vocab_size < 257:
        p.error(
            f"--bpe-vocab-size {args.bpe_vocab_size}: a byte-level BPE needs at least 257 (256 bytes + <eos>)"
        )
    for name in ("shard_tokens", "val_every", "workers", "bpe_sample_bytes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    if args.val_every < 2:
        p.error(f"--val-every {args.val_every}: must be at least 2 (1 leaves no training documents)")
    return PrepareSettings(**vars(args))


def main(argv: list[str] | None = None) -> None:
    """Console script ``attnlab-prepare`` (also ``python -m attnlab.cli.prepare``); a signal ends it in
    one line, its workers with it, and the same command run again continues where it stopped."""
    with interrupted_in_one_line("prepare"):
        prepare_command(argv)


def prepare_command(argv: list[str] | None = None) -> None:
    p = parser()
    settings = settings_of(p.parse_args(argv), p)
    try:
        manifest = prepare(settings)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    tokens, documents = manifest["tokens"], manifest["documents"]
    print(
        f"{settings.out}: {tokens['train']:,} training and {tokens['val']:,} validation tokens of "
        f"{documents['train'] + documents['val']:,} documents, {manifest['bytes_per_token']:.2f} bytes "
        f"of text per token; train on it with attnlab-train data=tokens data.path={settings.out}"
    )


if __name__ == "__main__":
    main()
