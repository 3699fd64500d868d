"""``attnlab-prepare``'s work: documents read from text, JSONL, parquet or a Hugging Face dataset,
tokenised in worker processes, written into token shards with a manifest (``shards.py``).

The shards are a function of the documents and the settings alone, never of the number of workers or
of where a previous prepare was killed: document i goes to validation when i % val_every is
val_every - 1, and a split's shard takes whole documents (each begun by the end-of-text token) until
the next would pass ``shard_tokens``. The manifest is rewritten after every shard, naming for each
split the first document its next shard starts at; a rerun reads past the documents already in
shards, removes any file the killed prepare left that the manifest does not list (and says so), and
refuses a listed shard whose bytes differ from the manifest's sha256.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from attnlab.data.documents import documents, input_size
from attnlab.data.shards import (
    MANIFEST,
    MANIFEST_FORMAT,
    SPLITS,
    TOKENIZER,
    ShardError,
    check_shard_bytes,
    read_manifest,
    sha256_of,
    token_dtype,
    write_manifest,
    write_shard,
)
from attnlab.data.token_workers import encoded_in_order

MANIFEST_VERSION = 1


@dataclass
class PrepareSettings:
    """What the shards depend on (kept in the manifest: a rerun must match them), then how fast to work."""

    out: str
    inputs: list[str] = field(default_factory=list)  # text, JSONL or parquet files, or folders of them
    hf_name: str | None = None  # a Hugging Face dataset instead of inputs ("json" + hf_data_files: local)
    hf_config: str | None = None
    hf_data_files: str | None = None
    hf_split: str = "train"
    streaming: bool = False  # read the hub dataset as a stream: nothing downloaded whole
    text_column: str = "text"
    tokenizer: str | None = None  # a tokenizer.json (or a folder holding one), or a hub name when online
    bpe_vocab_size: int | None = None  # without tokenizer: a byte-level BPE trained on a sample
    bpe_sample_bytes: int = 100_000_000  # the text the BPE is trained on: the first documents' bytes
    shard_tokens: int = 100_000_000  # llm.c's shard size
    val_every: int = 100  # every val_every-th document is validation (1%)
    # how fast, not what: not part of the manifest
    workers: int = field(default=max(1, (os.cpu_count() or 1) - 1), metadata={"speed": True})
    batch_documents: int = field(default=256, metadata={"speed": True})
    progress: bool = field(default=True, metadata={"speed": True})

    def identity(self) -> dict:
        """The settings the shards depend on, as the manifest keeps them."""
        kept = {k: v for k, v in asdict(self).items() if not self.__dataclass_fields__[k].metadata}
        kept["inputs"] = [str(Path(p).resolve()) for p in self.inputs]
        if self.tokenizer and Path(self.tokenizer).exists():
            kept["tokenizer"] = str(Path(self.tokenizer).resolve())
        kept["out"] = None  # the folder may move
        return kept


# -- the tokenizer ----------------------------------------------------------------------------------


def place_tokenizer(settings: PrepareSettings, out: Path) -> Path:
    """``out/tokenizer.json``: the given one copied, a hub tokenizer saved, or a BPE trained on the first
    ``bpe_sample_bytes`` of text. A rerun keeps the one already there (the manifest checks its hash)."""
    target = out / TOKENIZER
    if target.is_file():
        return target
    tmp = target.with_name(TOKENIZER + ".tmp")
    if settings.tokenizer:
        given = Path(settings.tokenizer).expanduser()
        given = given / TOKENIZER if given.is_dir() else given
        if given.is_file():
            shutil.copyfile(given, tmp)
        else:  # a hub name: downloaded when online
            from tokenizers import Tokenizer

            Tokenizer.from_pretrained(settings.tokenizer).save(str(tmp))
    else:
        from attnlab.data.tokenizers import train_bpe

        sample = sample_texts(settings)
        train_bpe(sample, settings.bpe_vocab_size or 0, roles=("eos",)).hf.save(str(tmp))
    os.replace(tmp, target)
    return target


def sample_texts(settings: PrepareSettings) -> Iterator[str]:
    """The first documents of the source, up to ``bpe_sample_bytes`` of text."""
    taken = 0
    for text, _ in documents(settings):
        if taken >= settings.bpe_sample_bytes:
            return
        taken += len(text.encode("utf-8"))
        yield text


def end_of_text_id(path: Path) -> tuple[int, int]:
    """(end-of-text id, vocabulary size) of a tokenizer file: its eos token, else its bos (GPT-2's
    ``<|endoftext|>`` is both); a tokenizer with neither cannot separate documents."""
    from attnlab.data.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(path)
    eot = tokenizer.eos_id if tokenizer.eos_id is not None else tokenizer.bos_id
    if eot is None:
        raise ValueError(
            f"--tokenizer {path}: has no end-of-text token (<|endoftext|>, </s>, <eos>) to separate documents"
        )
    return eot, tokenizer.vocab_size


# -- shards -----------------------------------------------------------------------------------------


class ShardWriter:
    """One split's documents gathered into shards of whole documents, each written when the next
    document would pass ``shard_tokens``; ``written(entry)`` is told of each."""

    def __init__(
        self, out: Path, split: str, shard_tokens: int, first_shard: int, written: Callable[[dict], None]
    ) -> None:
        self.out, self.split, self.shard_tokens, self.number = out, split, shard_tokens, first_shard
        self.written = written
        self.parts: list[np.ndarray] = []
        self.tokens = self.documents = self.text_bytes = 0
        self.next_document = 0

    def add(self, index: int, tokens: np.ndarray, text_bytes: int) -> None:
        if self.tokens and self.tokens + len(tokens) > self.shard_tokens:
            self.flush()
        self.parts.append(tokens)
        self.tokens += len(tokens)
        self.documents += 1
        self.text_bytes += text_bytes
        self.next_document = index + 1

    def flush(self) -> None:
        if not self.documents:
            return
        path = self.out / f"{self.split}_{self.number:06d}.bin"
        entry = write_shard(path, self.parts, self.documents)
        entry.update(split=self.split, text_bytes=self.text_bytes, next_document=self.next_document)
        self.written(entry)
        self.number += 1
        self.parts, self.tokens, self.documents, self.text_bytes = [], 0, 0, 0


def fresh_manifest(settings: PrepareSettings, tokenizer: Path, eot: int, vocab_size: int) -> dict:
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "complete": False,
        "settings": settings.identity(),
        "tokenizer": {"file": tokenizer.name, "sha256": sha256_of(tokenizer)},
        "vocab_size": vocab_size,
        "eot_id": eot,
        "dtype": token_dtype(vocab_size).name,
        "shards": [],
    }


def resumed_manifest(out: Path, fresh: dict, say: Callable[[str], None]) -> dict:
    """The manifest to continue from: the killed prepare's (its settings and tokenizer must be this one's,
    its shards' bytes the ones it lists), and every file it does not list removed, and said."""
    if not (out / MANIFEST).is_file():
        manifest = fresh
    else:
        manifest = read_manifest(out)
        for key in ("settings", "tokenizer"):
            if manifest.get(key) != fresh[key]:
                raise ShardError(
                    f"{out}: holds shards prepared with other {key} ({MANIFEST}); give another output "
                    "folder, or delete this one to prepare it again"
                )
        for entry in manifest["shards"]:
            check_shard_bytes(out, entry, full=True)
    listed = {entry["file"] for entry in manifest["shards"]} | {MANIFEST, TOKENIZER}
    for path in sorted(out.iterdir()):
        ours = path.suffix in (".bin", ".tmp") and path.name.split("_")[0] in SPLITS
        if path.name not in listed and (ours or path.name.endswith(".tmp")):
            path.unlink()
            say(f"removed {path.name}: the killed prepare had not recorded it in {MANIFEST}")
    return manifest


# -- the whole run ----------------------------------------------------------------------------------


def clock(seconds: float) -> str:
    """``seconds`` as h:mm:ss."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class Progress:
    """A line of tokens, tokens/s, MB/s of text and the time left: rewritten every second on a
    terminal, a new line every 30 seconds in a log."""

    def __init__(self, total_bytes: int | None, enabled: bool) -> None:
        self.total, self.enabled = total_bytes, enabled
        self.start = self.last = time.monotonic()
        self.tokens = self.bytes = 0
        self.terminal = sys.stderr.isatty()

    def advance(self, tokens: int, input_bytes: int) -> None:
        self.tokens += tokens
        self.bytes += input_bytes
        now = time.monotonic()
        if self.enabled and now - self.last >= (1.0 if self.terminal else 30.0):
            self.last = now
            self.show(now, end="" if self.terminal else "\n")

    def show(self, now: float, end: str) -> None:
        print(
            f"\r{self.line(now)}" if self.terminal else self.line(now), end=end, file=sys.stderr, flush=True
        )

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        text = f"prepare: {self.tokens / 1e6:.1f}M tokens, {self.tokens / elapsed / 1e6:.2f}M tokens/s, "
        text += f"{self.bytes / elapsed / 1e6:.1f} MB/s of text"
        if self.total and self.bytes:
            left = elapsed * (self.total - self.bytes) / self.bytes
            text += f", {100 * self.bytes / self.total:.0f}%, {clock(left)} left"
        return text

    def done(self) -> None:
        if self.enabled:
            self.show(time.monotonic(), end="\n")


def prepare(settings: PrepareSettings, say: Callable[[str], None] = print) -> dict:
    """Tokenise the source of ``settings`` into shards and a manifest in ``settings.out``, continuing a
    prepare killed there; the finished manifest. The workers are spawned processes, so a script that
    calls this needs Python's ``if __name__ == "__main__":`` guard."""
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = place_tokenizer(settings, out)
    eot, vocab_size = end_of_text_id(tokenizer)
    manifest = resumed_manifest(out, fresh_manifest(settings, tokenizer, eot, vocab_size), say)
    if manifest["complete"]:
        say(f"{out}: already prepared ({manifest['tokens']['train']:,} training tokens)")
        return manifest

    def written(entry: dict) -> None:
        manifest["shards"].append(entry)
        write_manifest(out, manifest)

    writers = {split: split_writer(out, manifest, split, settings.shard_tokens, written) for split in SPLITS}
    progress = Progress(input_size(settings), settings.progress)
    jobs = document_jobs(settings, writers, eot, token_dtype(vocab_size).name, progress)
    with closing(encoded_in_order(jobs, tokenizer, settings.workers)) as encoded:  # workers ended on any exit
        for indices, (tokens, lengths, text_bytes) in encoded:
            ends = np.cumsum(lengths)
            for index, end, length, size in zip(indices, ends, lengths, text_bytes, strict=True):
                split = split_of(index, settings.val_every)
                writers[split].add(index, tokens[end - length : end], int(size))
            progress.advance(len(tokens), 0)
    for writer in writers.values():
        writer.flush()
    progress.done()
    return finish(out, manifest)


def split_of(index: int, val_every: int) -> str:
    return "val" if index % val_every == val_every - 1 else "train"


def split_writer(out: Path, manifest: dict, split: str, shard_tokens: int, written: Callable) -> ShardWriter:
    """The writer of ``split``, after the shards the manifest lists for it."""
    done = [entry for entry in manifest["shards"] if entry["split"] == split]
    writer = ShardWriter(out, split, shard_tokens, len(done), written)
    writer.next_document = done[-1]["next_document"] if done else 0
    return writer


def document_jobs(
    settings: PrepareSettings, writers: dict[str, ShardWriter], eot: int, dtype: str, progress: Progress
) -> Iterator[tuple[list[int], tuple]]:
    """Batches of the documents not yet in a shard, as (their indices, a job for ``encode_documents``)."""
    resume_at = {split: writer.next_document for split, writer in writers.items()}
    indices: list[int] = []
    texts: list[str] = []
    for index, (text, input_bytes) in enumerate(documents(settings)):
        progress.advance(0, input_bytes)
        if index < resume_at[split_of(index, settings.val_every)]:
            continue
        indices.append(index)
        texts.append(text)
        if len(texts) == settings.batch_documents:
            yield indices, (texts, eot, dtype)
            indices, texts = [], []
    if texts:
        yield indices, (texts, eot, dtype)


def finish(out: Path, manifest: dict) -> dict:
    """The counts of every split and the bytes of text per token, and the manifest marked complete."""
    shards = manifest["shards"]
    for split in SPLITS:
        if not any(entry["split"] == split for entry in shards):
            raise ValueError(
                f"{out}: the {split} split is empty; give more documents, or a lower --val-every"
            )
    count = {
        key: {s: sum(e[key] for e in shards if e["split"] == s) for s in SPLITS}
        for key in ("tokens", "documents", "text_bytes")
    }
    manifest.update(count)
    manifest["bytes_per_token"] = sum(count["text_bytes"].values()) / sum(count["tokens"].values())
    manifest["complete"] = True
    write_manifest(out, manifest)
    return manifest
