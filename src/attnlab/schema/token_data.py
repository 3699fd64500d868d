"""``data.kind=tokens``: a corpus tokenised once into shards on disk (``attnlab-prepare``), nanoGPT's
``train.bin``/``val.bin`` or llm.c's shards, read where they lie (``attnlab.data.tokens``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.schema.choice import Choice
from attnlab.schema.data import DATA, DataKind, Packing, SequenceData
from attnlab.schema.errors import ConfigError, at_least_one


class TokenFormat(Choice):
    """How the files of ``data.path`` are laid out (``auto``: found from the names and headers)."""

    auto = "auto"
    attnlab = "attnlab"  # attnlab-prepare's shards and manifest.json
    nanogpt = "nanogpt"  # train.bin / val.bin: raw uint16 tokens, no header
    llmc = "llmc"  # llm.c / modded-nanogpt: *_train_*.bin / *_val_*.bin behind a 256 x int32 header


@DATA.register
@dataclass
class TokensData(SequenceData):
    """Token shards prepared once, read window by window: nothing else is loaded. Training windows are a
    function of (seed, global sample index), so any number of ranks and workers reads the same ones."""

    kind: DataKind = DataKind.tokens
    module: ClassVar[str] = "attnlab.data.tokens:TokensDataModule"
    seq_len: int = 256
    path: str | None = None  # the folder attnlab-prepare wrote (or nanoGPT's / llm.c's .bin files)
    format: TokenFormat = TokenFormat.auto
    tokenizer: str | None = None  # the tokenizer.json of a folder without a manifest (nanoGPT, llm.c)
    packing: Packing = Packing.none  # documents: each window carries its tokens' documents
    document_mask: bool = True  # packing=documents: attend within each document (false: across them)
    bos_aligned: bool = False  # training windows start at a document's first token
    val_windows: int | None = None  # the first N fixed validation windows (None: all of them)
    verify: bool = False  # check every shard's sha256 against the manifest when opening (reads it all)
    prepare_command: str | None = None  # the attnlab-prepare command that makes path (said when missing)

    def check(self) -> None:
        super().check()
        if not self.path:
            raise ConfigError("data.path", self.path, "data.kind=tokens needs the folder of token shards")
        if self.packing == Packing.padded:
            raise ConfigError("data.packing", "padded", "data.kind=tokens packs with none or documents")
        if not self.document_mask and self.packing != Packing.documents:
            raise ConfigError(
                "data.document_mask", False, f"applies to data.packing=documents only (not {self.packing})"
            )
        if self.val_windows is not None:
            at_least_one("data.val_windows", self.val_windows)
