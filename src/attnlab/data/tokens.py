"""``data.kind=tokens``: windows read from token shards on disk (``shards.py``); nothing else is loaded.

Training sample g (counted over all ranks, as ``sampling.py``'s stream position counts) is the window
whose start is a hash of (seed, g) modulo the number of window starts of the training shards (windows
never cross a shard's end). So a step's windows are a function of the seed and the step alone: the
same for one process or many, for any number of dataloader workers, disjoint between ranks (each
reads its own samples), and after a kill and ``ckpt_path=last`` the run continues at the saved
position with the windows the uninterrupted run drew. With ``data.bos_aligned`` the starts are
documents' first tokens instead. Evaluation reads fixed, non-overlapping windows of the validation
shards. With ``data.packing=documents`` each window carries its tokens' documents, found from the
end-of-text tokens inside it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from attnlab.data.module import AttnlabDataModule
from attnlab.data.packing import with_documents
from attnlab.data.sampling import Key, ShardedBatches, derive_seed, split_key
from attnlab.data.shards import TokenFolder, check_prepared, token_folder
from attnlab.data.text import causal_lm_sample, with_label_bytes
from attnlab.data.tokenizers import Tokenizer, load_tokenizer
from attnlab.schema.data import Packing
from attnlab.schema.errors import ConfigError
from attnlab.schema.token_data import TokensData

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over an array of uint64: a bijection that mixes every bit."""
    with np.errstate(over="ignore"):
        x = x + GOLDEN
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def window_starts(seed: int, samples: np.ndarray, count: int) -> np.ndarray:
    """Which of ``count`` window starts each global sample index reads: a hash of (seed, sample), so any
    split of the samples over processes and workers draws the same windows."""
    key = splitmix64(np.array([seed], dtype=np.uint64))
    return (splitmix64(samples.astype(np.uint64) ^ key) % np.uint64(count)).astype(np.int64)


class TokenStream:
    """The shards of one split as one row of window starts (start u: token u - bounds[i] of shard i).

    Windows are read with ``pread`` at their offsets in the shard files, not through a long-lived map:
    a mapped page stays in the process's resident memory once touched, and the page cache maps whole
    folios (2 MB on ext4 here), so 32 random windows of a map added ~60 MB and a map read through
    would hold the corpus. Only each shard's file, dtype, offset and length are kept (opened lazily in
    each process), so pickling the stream to a dataloader worker copies no tokens."""

    SCAN = 1 << 24  # tokens read at once when scanning a shard for documents

    def __init__(self, folder: TokenFolder, split: str, span: int, eot: int, bos_aligned: bool) -> None:
        self.folder, self.split, self.span, self.eot, self.bos_aligned = folder, split, span, eot, bos_aligned
        self.maps = [(m.filename, m.dtype, m.offset, len(m)) for m in folder.open(split) if len(m)]
        self.lengths = [length for *_, length in self.maps]
        self.tokens = sum(self.lengths)
        self.bounds = np.concatenate([[0], np.cumsum([max(0, n - span + 1) for n in self.lengths])])
        self._document_starts: np.ndarray | None = None
        self._files: dict[int, BinaryIO] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_files": {}}

    def read(self, shard: int, start: int, count: int) -> np.ndarray:
        """``count`` tokens of shard ``shard`` from token ``start`` (one ``pread``)."""
        filename, dtype, offset, _ = self.maps[shard]
        if shard not in self._files:
            self._files[shard] = open(filename, "rb", buffering=0)  # noqa: SIM115 (kept open: read often)
        data = os.pread(self._files[shard].fileno(), count * dtype.itemsize, offset + start * dtype.itemsize)
        return np.frombuffer(data, dtype=dtype)

    @property
    def count(self) -> int:
        """How many windows training draws from: every start, or every document's first token."""
        return len(self.document_starts) if self.bos_aligned else int(self.bounds[-1])

    @property
    def document_starts(self) -> np.ndarray:
        """The global starts of the windows that begin a document (found once, reading every token)."""
        if self._document_starts is None:
            found = [np.zeros(0, dtype=np.int64)]
            shift = 0 if self.folder.eot_starts_documents else 1
            for i, length in enumerate(self.lengths):
                for chunk in range(0, length, self.SCAN):
                    first = np.flatnonzero(self.read(i, chunk, min(self.SCAN, length - chunk)) == self.eot)
                    first = first + chunk + shift
                    found.append(first[first <= length - self.span] + self.bounds[i])
            self._document_starts = np.concatenate(found)
        return self._document_starts

    def windows(self, starts: np.ndarray) -> np.ndarray:
        """The windows (B, span) at global ``starts``, as int64."""
        shard = np.searchsorted(self.bounds, starts, side="right") - 1
        local = starts - self.bounds[shard]
        rows = [self.read(s, o, self.span) for s, o in zip(shard.tolist(), local.tolist(), strict=True)]
        return np.stack(rows).astype(np.int64)

    def window(self, shard: int, start: int) -> Tensor:
        """One window of shard ``shard`` from token ``start``, as int64."""
        return torch.from_numpy(self.read(shard, start, self.span).astype(np.int64))

    def documents(self, windows: Tensor) -> Tensor:
        """Each token's document within its window, counted at end-of-text tokens."""
        eot = windows == self.eot
        ids = torch.cumsum(eot, dim=-1)
        return ids if self.folder.eot_starts_documents else ids - eot.long()


def windows_sample(stream: TokenStream, windows: Tensor, packing: Packing, mask: bool) -> dict[str, Tensor]:
    sample = causal_lm_sample(windows)
    if packing == Packing.documents:
        return with_documents(sample, stream.documents(windows), True, mask)
    return sample


class FixedWindows(Dataset):
    """Evaluation samples: the non-overlapping windows of each shard (stride seq_len), in order."""

    def __init__(
        self, stream: TokenStream, stride: int, limit: int | None, packing: Packing, mask: bool
    ) -> None:
        self.stream, self.stride, self.packing, self.mask = stream, stride, packing, mask
        counts = [(n - stream.span) // stride + 1 if n >= stream.span else 0 for n in stream.lengths]
        self.bounds = np.concatenate([[0], np.cumsum(counts)])
        self.count = int(self.bounds[-1]) if limit is None else min(limit, int(self.bounds[-1]))

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, key: Key) -> dict[str, Tensor]:
        index = split_key(key)[1]
        shard = int(np.searchsorted(self.bounds, index, side="right") - 1)
        start = (index - int(self.bounds[shard])) * self.stride
        return windows_sample(self.stream, self.stream.window(shard, start), self.packing, self.mask)


class TokenBatches(ShardedBatches):
    """This rank's training windows at each stream position: samples position + rows, each a window
    chosen by ``window_starts``."""

    def __init__(self, stream: TokenStream, packing: Packing, mask: bool, **shard: int) -> None:
        super().__init__(**shard)
        if stream.count < 1:
            raise ValueError(f"the training shards hold no window of {stream.span} tokens")
        self.stream, self.packing, self.mask = stream, packing, mask

    def fingerprint(self) -> dict[str, int]:
        stream = self.stream
        return {"seed": self.seed, "tokens": stream.tokens, "span": stream.span, "starts": stream.count}

    def __getitem__(self, position: int) -> dict[str, Tensor]:
        samples = np.arange(position + self.rows.start, position + self.rows.stop, dtype=np.uint64)
        chosen = window_starts(self.seed, samples, self.stream.count)
        starts = self.stream.document_starts[chosen] if self.stream.bos_aligned else chosen
        windows = torch.from_numpy(self.stream.windows(starts))
        return windows_sample(self.stream, windows, self.packing, self.mask)


class TokensDataModule(AttnlabDataModule):
    """``data.kind=tokens``: causal-LM windows over token shards (``data.path``), read where they lie."""

    cfg: TokensData

    def build(self) -> dict[str, Dataset]:
        cfg = self.cfg
        check_prepared(cfg)
        folder = token_folder(Path(cfg.path), cfg.format, cfg.verify)
        self.tokenizer = self.load_tokenizer(folder)
        eot = folder.eot_id if folder.eot_id is not None else self.end_of_text()
        span = cfg.seq_len + 1
        streams = {
            split: TokenStream(folder, split, span, eot, cfg.bos_aligned) for split in ("train", "val")
        }
        for split, stream in streams.items():
            if stream.bounds[-1] == 0:
                raise ValueError(
                    f"the {split} shards of data.path={cfg.path!r} hold no window of {span} tokens "
                    f"(data.seq_len={cfg.seq_len}; the longest shard has {max(stream.lengths, default=0)})"
                )
        self.train_stream = streams["train"]
        val = FixedWindows(streams["val"], cfg.seq_len, cfg.val_windows, cfg.packing, cfg.document_mask)
        train = FixedWindows(streams["train"], cfg.seq_len, None, cfg.packing, cfg.document_mask)
        return {"train": train, "val": val, "test": val}

    def load_tokenizer(self, folder: TokenFolder) -> Tokenizer:
        """``data.tokenizer`` if given, else the folder's (attnlab-prepare saves it beside the shards)."""
        path = self.cfg.tokenizer or folder.tokenizer
        if path is None:
            raise ConfigError(
                "data.tokenizer",
                None,
                f"the {folder.format} files of data.path={self.cfg.path!r} name no tokenizer: give the "
                "tokenizer.json their tokens come from (GPT-2's for nanoGPT's openwebtext)",
            )
        return load_tokenizer(path).add_specials(self.special_roles)

    def end_of_text(self) -> int:
        eot = self.tokenizer.eos_id if self.tokenizer.eos_id is not None else self.tokenizer.bos_id
        if eot is None:
            raise ConfigError(
                "data.tokenizer", self.cfg.tokenizer, "has no end-of-text token (<|endoftext|>, </s>, <eos>)"
            )
        return eot

    def eval_collate_fn(self) -> Callable[[list[dict[str, Any]]], dict[str, Tensor]]:
        """Evaluation batches carry ``label_bytes`` for bits per byte, as ``data.kind=text``'s do."""
        collate = self.collate_fn()
        table = self.tokenizer.token_bytes()
        if table is None:
            return collate
        return functools.partial(with_label_bytes, collate, torch.tensor(table, dtype=torch.int32))

    def train_batches(self, **shard: int) -> ShardedBatches:
        shard["seed"] = derive_seed(shard["seed"], 3)
        return TokenBatches(self.train_stream, self.cfg.packing, self.cfg.document_mask, **shard)
