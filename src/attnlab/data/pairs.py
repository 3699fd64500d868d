"""Sequence-to-sequence pairs: generated (dates, numbers, reverse) or parallel text (files, HF).

Source and target share one tokenizer trained on both sides of the training split. A batch holds
``src_ids``/``src_mask``, ``tgt_in`` (<bos> + target), ``tgt_mask`` and ``labels`` (target + <eos>,
IGNORE_INDEX at padding). Files and HF data are cut to ``data.seq_len`` tokens per side; a generated task
that does not fit is an error (a cut example could never be matched exactly).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from attnlab.data import generated
from attnlab.data.checks import check_columns, wanted_columns
from attnlab.data.classification import pad_ids
from attnlab.data.module import AttnlabDataModule
from attnlab.data.sampling import Key, split_key
from attnlab.data.sources import column_splits
from attnlab.data.tokenizers import Tokenizer, build_tokenizer
from attnlab.schema.data import IGNORE_INDEX
from attnlab.schema.errors import ConfigError


class Pairs(Dataset):
    """(source ids, target ids) tokenised up front; the target leaves room for <bos>/<eos>."""

    def __init__(self, pairs: list[tuple[str, str]], tokenizer: Tokenizer, seq_len: int) -> None:
        sources = tokenizer.encode_batch([s for s, _ in pairs])
        targets = tokenizer.encode_batch([t for _, t in pairs])
        self.pairs = [
            (torch.tensor(s[:seq_len], dtype=torch.long), torch.tensor(t[: seq_len - 1], dtype=torch.long))
            for s, t in zip(sources, targets)
        ]
        self.longest = max((max(len(s), len(t) + 1) for s, t in zip(sources, targets)), default=0)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, key: Key) -> dict[str, Tensor]:
        src, tgt = self.pairs[split_key(key)[1]]
        return {"src": src, "tgt": tgt}


GENERATED = ("dates", "numbers", "reverse")


def translation_pairs(columns: dict[str, list[Any]], cfg: Any, where: str) -> list[tuple[str, str]]:
    """Pairs from a dict column such as {"translation": {"de": ..., "en": ...}}."""
    pairs = []
    for number, entry in enumerate(columns[cfg.translation_column], start=1):
        if not isinstance(entry, dict):
            raise ValueError(
                f"{where}: data.translation_column={cfg.translation_column!r} of record {number} is not a "
                "{language: text} mapping"
            )
        check_columns(
            list(entry),
            {"data.source_lang": cfg.source_lang, "data.target_lang": cfg.target_lang},
            f"{where} (the languages of data.translation_column={cfg.translation_column!r})",
        )
        pairs.append((str(entry[cfg.source_lang]), str(entry[cfg.target_lang])))
    return pairs


class PairsDataModule(AttnlabDataModule):
    """``data.kind`` in dates, numbers, reverse (generated) and pairs (``data.path`` or ``data.hf_name``)."""

    def build(self) -> dict[str, Dataset]:
        cfg = self.cfg
        splits = self.generated_pairs() if cfg.kind in GENERATED else self.user_pairs()
        self.tokenizer = build_tokenizer(
            cfg.tokenizer,
            {split: [text for pair in pairs for text in pair] for split, pairs in splits.items()},
            roles=self.special_roles,
            bpe_vocab_size=cfg.bpe_vocab_size,
        )
        datasets = {split: Pairs(pairs, self.tokenizer, cfg.seq_len) for split, pairs in splits.items()}
        longest = max(d.longest for d in datasets.values())
        if cfg.kind in GENERATED and longest > cfg.seq_len:
            raise ConfigError(
                "data.seq_len",
                cfg.seq_len,
                f"too short for data.kind={cfg.kind!r}: its longest example needs {longest} tokens; "
                f"set at least {longest}",
            )
        return datasets

    def generated_pairs(self) -> dict[str, list[tuple[str, str]]]:
        cfg = self.cfg
        sizes = {"train": cfg.num_train, "val": cfg.num_val, "test": cfg.num_test}
        if cfg.kind == "reverse":  # the one generator with a setting of its own
            make = partial(generated.reverse, max_len=cfg.reverse_max_len)
        else:
            make = {"dates": generated.dates, "numbers": generated.numbers}[cfg.kind]
        return generated.unseen_splits(make, sizes, self.seed)

    def user_pairs(self) -> dict[str, list[tuple[str, str]]]:
        cfg = self.cfg
        columns, where = column_splits(cfg, wanted_columns(cfg), self.seed)
        if cfg.source_lang is not None:
            return {split: translation_pairs(cols, cfg, where) for split, cols in columns.items()}
        return {
            split: [(str(s), str(t)) for s, t in zip(cols[cfg.source_column], cols[cfg.target_column])]
            for split, cols in columns.items()
        }

    def collate_fn(self) -> Callable[[list[dict[str, Tensor]]], dict[str, Tensor]]:
        tok = self.tokenizer
        return partial(collate_pairs, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id)


def collate_pairs(
    samples: list[dict[str, Tensor]], pad_id: int, bos_id: int, eos_id: int
) -> dict[str, Tensor]:
    """The seq2seq batch: padded source, <bos> + target as decoder input, target + <eos> as labels."""
    bos, eos = torch.tensor([bos_id]), torch.tensor([eos_id])
    src_ids, src_mask = pad_ids([s["src"] for s in samples], pad_id)
    tgt_in, tgt_mask = pad_ids([torch.cat([bos, s["tgt"]]) for s in samples], pad_id)
    labels, _ = pad_ids([torch.cat([s["tgt"], eos]) for s in samples], IGNORE_INDEX)
    return {
        "src_ids": src_ids,
        "src_mask": src_mask,
        "tgt_in": tgt_in,
        "tgt_mask": tgt_mask,
        "labels": labels,
    }
