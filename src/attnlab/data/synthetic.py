"""Synthetic tasks for language models, each a prompt followed by an exact answer:

- copy: a random string, '=', then the string again       "qwkz=" -> "qwkz"
- passkey: filler with 'k:<digits>;' at a depth, '?k:'    "the gr...k:40213;...ss ?k:" -> "40213"
- recall: key-value pairs, '?', a key                     "ab3cd7ef1?cd" -> "7"
- addition: two n-digit numbers                           "073+945=" -> "1018"
- repeated_segments: letters, then a segment twice          "qxabcdea" -> "bcde" (segment "abcde")

Each example is drawn from its own generator, seeded by (seed, split, index): the same seed gives the
same examples on every rank and worker, in any order, and no example is held in memory. A row is the
example's characters (one token each) shifted by one: ``input_ids`` = example[:-1], ``labels`` =
example[1:] with IGNORE_INDEX wherever the next character is still prompt, so the loss is the
answer-token loss and a row is right exactly when every answer token is.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset, default_collate

from attnlab.data.module import AttnlabDataModule
from attnlab.data.pairs import collate_pairs
from attnlab.data.sampling import Key, split_key
from attnlab.data.tokenizers import char_tokenizer
from attnlab.schema.data import IGNORE_INDEX
from attnlab.schema.synthetic_data import PasskeyData, SyntheticData

FILLER = "the grass is green. the sky is blue. the sun is yellow. here we go. there and back again. "
# Every character any task writes: the vocabulary is the same for every task, length and seed, so a
# model trained at one length reads any other.
ALPHABET = string.ascii_lowercase + string.digits + "=?:;+. "
RECALL_KEYS = [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase]

Example = tuple[str, str]  # (prompt, answer)


def copy(rng: random.Random, cfg: SyntheticData) -> Example:
    """A string of seq_len // 2 letters, '=', then the string."""
    text = "".join(rng.choices(string.ascii_lowercase, k=cfg.seq_len // 2))
    return text + "=", text


def passkey(rng: random.Random, cfg: PasskeyData) -> Example:
    """Filler (from a random point of FILLER) holding the key at ``passkey_depth`` of it, then the question."""
    key = "".join(rng.choices(string.digits, k=cfg.passkey_digits))
    n_filler = cfg.seq_len + 1 - (2 * cfg.passkey_digits + 6)  # needle d + 3, question 3, answer d
    start = rng.randrange(len(FILLER))
    filler = (FILLER * (2 + n_filler // len(FILLER)))[start : start + n_filler]
    depth = cfg.passkey_depth if cfg.passkey_depth is not None else rng.random()
    at = round(depth * n_filler)
    return f"{filler[:at]}k:{key};{filler[at:]}?k:", key


def recall(rng: random.Random, cfg: SyntheticData) -> Example:
    """(seq_len - 3) // 3 pairs of a two-letter key (all distinct) and a digit; then '?' and one of the keys."""
    keys = rng.sample(RECALL_KEYS, min((cfg.seq_len - 3) // 3, len(RECALL_KEYS)))
    values = rng.choices(string.digits, k=len(keys))
    asked = rng.randrange(len(keys))
    return "".join(k + v for k, v in zip(keys, values)) + "?" + keys[asked], values[asked]


def addition(rng: random.Random, cfg: SyntheticData) -> Example:
    """Two numbers of n = (seq_len - 2) // 3 digits (zero-padded), their sum in n + 1 digits."""
    n = (cfg.seq_len - 2) // 3
    a, b = rng.randrange(10**n), rng.randrange(10**n)
    return f"{a:0{n}d}+{b:0{n}d}=", f"{a + b:0{n + 1}d}"


def repeated_segments(rng: random.Random, cfg: SyntheticData) -> Example:
    """seq_len + 1 letters: a random prefix, a segment of seq_len // 4 to (seq_len + 1) // 2 letters,
    and the segment again; the prompt ends with the repeat's first letter (which nothing predicts) and
    the answer is the rest of the repeat."""
    n = cfg.seq_len + 1
    length = rng.randint(max(4, cfg.seq_len // 4), n // 2)
    prefix = "".join(rng.choices(string.ascii_lowercase, k=n - 2 * length))
    segment = "".join(rng.choices(string.ascii_lowercase, k=length))
    return prefix + segment + segment[0], segment[1:]


def example_rng(seed: int, split: str, index: int) -> random.Random:
    """The generator of one example (a str seed is hashed with SHA-512: the same in every process)."""
    return random.Random(f"{seed}/{split}/{index}")


class SyntheticSet(Dataset):
    """``size`` examples of a task, each generated on access from (seed, split, index): a causal LM's
    row, or with ``pairs`` an encoder-decoder's (source: the prompt, target: the answer)."""

    def __init__(
        self,
        make: Callable[..., Example],
        cfg: SyntheticData,
        ids: dict[str, int],
        seed: int,
        split: str,
        size: int,
        pairs: bool = False,
    ) -> None:
        self.make, self.cfg, self.ids, self.seed, self.split, self.size = make, cfg, ids, seed, split, size
        self.pairs = pairs

    def __len__(self) -> int:
        return self.size

    def example(self, index: int) -> Example:
        rng = example_rng(self.seed, self.split, index)
        if self.split == "train" and self.cfg.train_min_len is not None:  # each its own length
            return self.make(
                rng, replace(self.cfg, seq_len=rng.randint(self.cfg.train_min_len, self.cfg.seq_len))
            )
        return self.make(rng, self.cfg)

    def encode(self, text: str) -> Tensor:
        return torch.tensor([self.ids[c] for c in text], dtype=torch.long)

    def __getitem__(self, key: Key) -> dict[str, Tensor]:
        prompt, answer = self.example(split_key(key)[1])
        if self.pairs:
            return {"src": self.encode(prompt), "tgt": self.encode(answer)}
        ids = self.encode(prompt + answer)
        labels = ids[1:].clone()
        labels[: len(prompt) - 1] = IGNORE_INDEX  # predicting the prompt is not the task
        return {"input_ids": ids[:-1], "labels": labels}


class SyntheticDataModule(AttnlabDataModule):
    """The data module of a synthetic kind; each subclass names its generator (``make``). A task that
    brackets its targets (``DataNeeds.specials`` with bos and eos: seq2seq) gets (prompt, answer) pairs,
    scored by its own greedy-decoded exact match."""

    make: Callable[..., Example]

    def build(self) -> dict[str, Dataset]:
        self.tokenizer = char_tokenizer([ALPHABET], roles=self.special_roles)
        ids = {c: self.tokenizer.encode(c)[0] for c in ALPHABET}
        sizes = {"train": self.cfg.num_train, "val": self.cfg.num_val, "test": self.cfg.num_test}
        return {
            split: SyntheticSet(type(self).make, self.cfg, ids, self.seed, split, size, self.pairs)
            for split, size in sizes.items()
        }

    @property
    def pairs(self) -> bool:
        return {"bos", "eos"} <= set(self.special_roles)

    def collate_fn(self) -> Callable[[list[dict[str, Any]]], dict[str, Tensor]]:
        tok = self.tokenizer
        if self.pairs:
            return partial(collate_pairs, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id)
        return collate_rows

    def eval_collate_fn(self) -> Callable[[list[dict[str, Any]]], dict[str, Tensor]]:
        return self.collate_fn() if self.pairs else collate_answers


def collate_rows(samples: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """A training batch of causal-LM rows, the shorter ones (``data.train_min_len``) padded on the right
    to the longest: the inputs with token 0, the labels with IGNORE_INDEX. A causal model's outputs at
    a row's real positions never see what follows them, so the padding changes no loss; rows of one
    length give exactly ``default_collate``'s batch."""
    width = max(len(s["input_ids"]) for s in samples)
    if all(len(s["input_ids"]) == width for s in samples):
        return default_collate(samples)
    batch = {
        "input_ids": torch.zeros(len(samples), width, dtype=torch.long),
        "labels": torch.full((len(samples), width), IGNORE_INDEX, dtype=torch.long),
    }
    for row, sample in enumerate(samples):
        n = len(sample["input_ids"])
        batch["input_ids"][row, :n] = sample["input_ids"]
        batch["labels"][row, :n] = sample["labels"]
    return batch


def collate_answers(samples: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """An evaluation batch whose rows are each one whole answer (``answer_rows``: exact match is scored)."""
    batch = default_collate(samples)
    batch["answer_rows"] = torch.ones(len(samples), dtype=torch.bool)
    return batch


class CopyDataModule(SyntheticDataModule):
    make = staticmethod(copy)


class PasskeyDataModule(SyntheticDataModule):
    make = staticmethod(passkey)


class RecallDataModule(SyntheticDataModule):
    make = staticmethod(recall)


class AdditionDataModule(SyntheticDataModule):
    make = staticmethod(addition)


class RepeatedSegmentsDataModule(SyntheticDataModule):
    make = staticmethod(repeated_segments)
