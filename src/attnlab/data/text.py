"""Text for language models: the corpus, windows over its token stream, BERT's masking.

Sources (``data.kind=text``): the default corpus (the English prose of the Python documentation
shipped with every Python, in ``pydoc_data``), a local file or folder (``data.path``), or a
Hugging Face dataset (``data.hf_name``). Training draws windows at random offsets, a whole batch at
once: the offsets of the step's G windows from a generator seeded by (seed, position), one gather
from the token tensor. Evaluation reads the fixed non-overlapping windows. MLM masks the same
windows (80/10/10), its randomness drawn for the global batch too, so any number of ranks agrees.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from attnlab.data.checks import text_files
from attnlab.data.module import AttnlabDataModule
from attnlab.data.sampling import (
    Key,
    ShardedBatches,
    batch_generator,
    derive_seed,
    split_key,
    torch_generator,
)
from attnlab.data.sources import carve_text, hf_columns, hf_splits, read_text_files
from attnlab.data.tokenizers import Tokenizer, build_tokenizer
from attnlab.schema.data import IGNORE_INDEX, DataConfig


def default_corpus() -> str:
    """The Python documentation's topic texts (``pydoc_data.topics``), in sorted key order: ~0.46 MB of
    English prose with code, in the standard library of every Python, so no download is needed.
    """
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key].strip("\n") for key in sorted(topics)) + "\n"


def text_splits(cfg: DataConfig, seed: int) -> dict[str, str]:
    """The train/val/test text of ``data.kind=text``: the default corpus, the files of ``data.path``, or
    the rows of a Hugging Face dataset joined by newlines. A split the source lacks is carved from the
    end of the training text (contiguous characters: validation, then test)."""
    if cfg.hf_name:
        texts = {}
        for split, dataset in hf_splits(cfg, seed, shuffle=False, carve=False).items():
            rows = hf_columns(dataset, {"data.text_column": cfg.text_column}, cfg)[cfg.text_column]
            texts[split] = "\n".join(str(row).rstrip("\n") for row in rows)
    elif cfg.path is not None:
        texts = {split: read_text_files(files) for split, files in text_files(cfg.path).items()}
    else:
        texts = {"train": default_corpus()}
    return carve_text(texts, cfg.val_fraction, cfg.test_fraction)


def unigram_entropy(ids: Iterable[int]) -> float:
    """Entropy in nats of the token frequencies: the loss of the best model that ignores context."""
    counts = np.array(list(Counter(ids).values()), dtype=np.float64)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def window_view(tokens: Tensor, span: int) -> Tensor:
    """Every window of ``span`` tokens as rows of a view (no copy): row i starts at token i."""
    return tokens.unfold(0, span, 1)


class Windows(Dataset):
    """The fixed, non-overlapping windows of ``span`` tokens starting at 0, stride, 2 * stride, ...

    A causal LM uses span = seq_len + 1 (inputs and shifted labels), stride = seq_len.
    """

    def __init__(self, tokens: Tensor, span: int, stride: int) -> None:
        self.tokens, self.span, self.stride = tokens, span, stride
        self.count = (len(tokens) - span) // stride + 1 if len(tokens) >= span else 0

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, key: Key) -> Tensor:
        start = split_key(key)[1] * self.stride
        return self.tokens[start : start + self.span].long()


@dataclass
class Masking:
    """BERT's masking of a tokenizer's ids: ``probability`` of choosing a token that is not special; of
    the chosen, 80% become ``mask_id``, 10% a random ordinary token, 10% stay."""

    probability: float
    mask_id: int
    special_ids: Tensor
    ordinary_ids: Tensor

    @classmethod
    def of(cls, tokenizer: Tokenizer, probability: float) -> Masking:
        specials = sorted(tokenizer.all_special_ids)
        ordinary = sorted(set(range(tokenizer.vocab_size)) - set(specials))
        return cls(probability, tokenizer.mask_id, torch.tensor(specials), torch.tensor(ordinary))

    def noise(self, shape: tuple[int, ...], generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """The random draws of ``shape`` tokens: whether chosen, how replaced, by which ordinary token."""
        choose, kind = torch.rand(shape, generator=generator), torch.rand(shape, generator=generator)
        return choose, kind, torch.randint(len(self.ordinary_ids), shape, generator=generator)

    def apply(self, ids: Tensor, noise: tuple[Tensor, Tensor, Tensor]) -> dict[str, Tensor]:
        """``input_ids`` masked, ``labels`` (the original ids at chosen positions, IGNORE_INDEX elsewhere) and an
        all-true ``attention_mask``."""
        choose, kind, replacement = noise
        chosen = (choose < self.probability) & ~torch.isin(ids, self.special_ids)
        inputs = torch.where(chosen & (kind < 0.8), self.mask_id, ids)
        inputs = torch.where(chosen & (kind >= 0.8) & (kind < 0.9), self.ordinary_ids[replacement], inputs)
        return {
            "input_ids": inputs,
            "attention_mask": torch.ones_like(ids, dtype=torch.bool),
            "labels": torch.where(chosen, ids, IGNORE_INDEX),
        }


def causal_lm_sample(window: Tensor) -> dict[str, Tensor]:
    """``input_ids`` and the next tokens as ``labels``, from windows of seq_len + 1 tokens (..., T + 1)."""
    return {"input_ids": window[..., :-1], "labels": window[..., 1:]}


def with_label_bytes(
    collate: Callable[[list[dict[str, Any]]], dict[str, Tensor]], table: Tensor, samples: list[dict[str, Any]]
) -> dict[str, Tensor]:
    """``collate(samples)`` with ``label_bytes`` (B, T): the UTF-8 bytes of the text each label token
    covers, looked up in ``table`` (one count per id); 0 where the label is IGNORE_INDEX (padding, a document
    boundary), so the scored tokens' bytes are the batch's sum."""
    batch = collate(samples)
    labels = batch["labels"]
    batch["label_bytes"] = torch.where(labels == IGNORE_INDEX, 0, table[labels.clamp(min=0)])
    return batch


class EvalWindows(Dataset):
    """Evaluation samples: the fixed windows, as causal-LM pairs or masked by (seed, window index)."""

    def __init__(self, windows: Windows, masking: Masking | None, seed: int) -> None:
        self.windows, self.masking, self.seed = windows, masking, seed

    @property
    def tokens(self) -> Tensor:
        """The split's token stream."""
        return self.windows.tokens

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, key: Key) -> dict[str, Tensor]:
        window, index = self.windows[key], split_key(key)[1]
        if self.masking is None:
            return causal_lm_sample(window)
        return self.masking.apply(window, self.masking.noise(window.shape, torch_generator(self.seed, index)))


class WindowBatches(ShardedBatches):
    """Training batches of windows at random offsets: the G offsets of a stream position are drawn at
    once from a generator seeded by (seed, position), this rank's rows gathered in one ``index_select``
    from the view of all windows (see benchmarks/data.py for its cost)."""

    def __init__(self, tokens: Tensor, span: int, masking: Masking | None, **shard: int) -> None:
        super().__init__(**shard)
        if len(tokens) < span:
            raise ValueError(f"a stream of {len(tokens)} tokens holds no window of {span}")
        self.tokens, self.span, self.masking = tokens, span, masking

    def fingerprint(self) -> dict[str, int]:
        return {"seed": self.seed, "tokens": len(self.tokens), "span": self.span}

    def __getitem__(self, position: int) -> dict[str, Tensor]:
        offsets, generator = self.offsets(position)
        return self.sample(self.gather(self.tokens, offsets), generator)

    def offsets(self, position: int) -> tuple[Tensor, torch.Generator]:
        """Where this rank's windows start, and the batch's generator (MLM draws its noise from it next)."""
        generator = batch_generator(self.seed, position)
        starts = len(self.tokens) - self.span + 1
        return torch.randint(starts, (self.global_batch,), generator=generator)[self.rows], generator

    def gather(self, stream: Tensor, offsets: Tensor) -> Tensor:
        """The windows (B, span) of ``stream`` (the tokens, or a stream parallel to them) at ``offsets``."""
        return torch.index_select(window_view(stream, self.span), 0, offsets).long()

    def sample(self, windows: Tensor, generator: torch.Generator) -> dict[str, Tensor]:
        """Causal-LM pairs of the windows, or their MLM masking drawn for the global batch."""
        if self.masking is None:
            return causal_lm_sample(windows)
        noise = self.masking.noise((self.global_batch, self.span), generator)
        return self.masking.apply(windows, tuple(n[self.rows] for n in noise))


class TextDataModule(AttnlabDataModule):
    """``data.kind=text``: next-token windows, or masked ones for a task that needs masking (BERT's
    masked LM, ``DataNeeds.masking``); with ``data.packing`` set,
    ``attnlab.data.packing.DocumentDataModule`` reads it as separate documents."""

    masking: Masking | None = None

    def build(self) -> dict[str, Dataset]:
        cfg = self.cfg
        texts = text_splits(cfg, self.seed)
        self.tokenizer = build_tokenizer(
            cfg.tokenizer,
            {split: [text] for split, text in texts.items()},
            roles=self.special_roles,
            bpe_vocab_size=cfg.bpe_vocab_size,
        )
        self.masking = Masking.of(self.tokenizer, cfg.mlm_probability) if self.needs.masking else None
        span = cfg.seq_len + 1 if self.masking is None else cfg.seq_len
        datasets = {}
        for split, text in texts.items():
            if not text and split == "test" and cfg.test_fraction == 0:
                continue
            windows = Windows(self.encode(text, split, span), span, cfg.seq_len)
            datasets[split] = EvalWindows(windows, self.masking, derive_seed(self.seed, 4))
        return datasets

    def encode(self, text: str, split: str, span: int) -> Tensor:
        """The token stream of one split; text the tokenizer cannot encode is an error naming the split.
        (Through numpy: ``torch.tensor`` of a list of ints takes 3x as long, 36 ms for the default corpus.)"""
        try:
            tokens = torch.from_numpy(self.tokenizer.encode_corpus_array(text))
        except ValueError as err:
            raise ValueError(f"the {split} split of {self.source_name()}: {err}") from None
        if len(tokens) < span:
            raise ValueError(
                f"the {split} split has {len(tokens)} tokens, fewer than one window of {span} "
                f"(data.seq_len={self.cfg.seq_len}); lower data.seq_len or give it more text"
            )
        return tokens

    def eval_collate_fn(self) -> Callable[[list[dict[str, Any]]], dict[str, Tensor]]:
        """Causal-LM evaluation batches carry ``label_bytes`` (``with_label_bytes``), from which the task
        reports bits per byte, a loss comparable across tokenizers. The count is the tokenizer's per id
        (``Tokenizer.token_bytes``): the labels are the text's own tokens, so one table lookup is exact and
        needs no parallel stream of offsets, nor the task any knowledge of the text or the tokenizer.
        Tokenizers for which it would not be exact give none, and the batches carry none. Masked-LM
        batches carry none either: their scored tokens are a random tenth of the text, not a stretch of it."""
        collate = self.collate_fn()
        table = self.tokenizer.token_bytes() if self.masking is None else None
        if table is None:
            return collate
        return functools.partial(with_label_bytes, collate, torch.tensor(table, dtype=torch.int32))

    def source_name(self) -> str:
        cfg = self.cfg
        if cfg.hf_name:
            return f"data.hf_name={cfg.hf_name!r}"
        return f"data.path={cfg.path!r}" if cfg.path else "the default corpus"

    def train_batches(self, **shard: int) -> ShardedBatches:
        windows = self.datasets["train"].windows
        shard["seed"] = derive_seed(shard["seed"], 3)
        return WindowBatches(windows.tokens, windows.span, self.masking, **shard)

    def unigram_entropy(self, split: str = "val") -> float:
        """Entropy (nats per token) of a split's token frequencies: a loss any context-aware LM must beat."""
        return unigram_entropy(self.datasets[split].tokens.tolist())
