"""Sequence classification with the encoder: generated ListOps, and labelled text from files or HF.

Each sample is ``<cls>`` followed by the text's tokens (cut to ``data.seq_len``); batches are padded
to their longest sample: ``input_ids``, ``attention_mask`` (True at real tokens), ``labels`` (B,).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset

from attnlab.data import listops
from attnlab.data.checks import wanted_columns
from attnlab.data.module import AttnlabDataModule
from attnlab.data.sampling import Key, split_key
from attnlab.data.sources import column_splits
from attnlab.data.tokenizers import Tokenizer, build_tokenizer, word_level


def pad_ids(rows: list[Tensor], pad_value: int) -> tuple[Tensor, Tensor]:
    """Right-pad 1-D id tensors to (B, T) and the mask (B, T) that is True at real tokens."""
    ids = pad_sequence(rows, batch_first=True, padding_value=pad_value)
    lengths = torch.tensor([len(r) for r in rows])
    return ids, torch.arange(ids.shape[1]) < lengths[:, None]


def collate_labelled(samples: list[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
    """``input_ids`` and ``attention_mask`` padded to the longest sample, ``labels`` (B,)."""
    input_ids, attention_mask = pad_ids([s["input_ids"] for s in samples], pad_id)
    labels = torch.tensor([s["labels"] for s in samples], dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class LabelledTexts(Dataset):
    """Texts tokenised once up front, each as ``<cls>`` + tokens, at most ``seq_len`` ids."""

    def __init__(self, texts: list[str], labels: list[int], tokenizer: Tokenizer, seq_len: int) -> None:
        encoded = tokenizer.encode_batch([str(t) for t in texts])
        self.ids = [torch.tensor([tokenizer.cls_id, *ids][:seq_len], dtype=torch.long) for ids in encoded]
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: Key) -> dict[str, Any]:
        index = split_key(key)[1]
        return {"input_ids": self.ids[index], "labels": self.labels[index]}


class ClassificationDataModule(AttnlabDataModule):
    """Shared by ListOps and text classification: subclasses give texts and integer labels per split."""

    def collate_fn(self) -> Callable[[list[dict[str, Any]]], dict[str, Tensor]]:
        return partial(collate_labelled, pad_id=self.pad_id)


class ListOpsDataModule(ClassificationDataModule):
    """``data.kind=listops``: expressions generated from the seed, a fixed 15-word vocabulary, 10 classes."""

    def build(self) -> dict[str, Dataset]:
        cfg = self.cfg
        self.tokenizer = word_level(listops.VOCABULARY, "space", self.special_roles)
        self.num_classes = listops.NUM_CLASSES
        sizes = {"train": cfg.num_train, "val": cfg.num_val, "test": cfg.num_test}
        datasets = {}
        for split, n in sizes.items():
            rows = listops.generate(
                n,
                f"{self.seed}/{split}",
                max_len=cfg.seq_len - 1,
                max_depth=cfg.listops_max_depth,
                max_args=cfg.listops_max_args,
                op_prob=cfg.listops_op_prob,
            )
            datasets[split] = LabelledTexts(
                [t for t, _ in rows], [y for _, y in rows], self.tokenizer, cfg.seq_len
            )
        return datasets


def label_ids(splits: dict[str, list[Any]], where: str) -> tuple[dict[str, list[int]], list[str] | None]:
    """Integer labels kept as they are; string labels numbered in sorted order of the training labels.

    Returns the ids per split and the label names (None for integer labels).
    """
    if all(isinstance(y, int) and not isinstance(y, bool) for ys in splits.values() for y in ys):
        negative = [y for ys in splits.values() for y in ys if y < 0]
        if negative:
            raise ValueError(f"{where}: labels must be 0 or more, found {negative[0]}")
        return splits, None
    names = sorted({str(y) for y in splits["train"]})
    index = {name: i for i, name in enumerate(names)}
    ids = {}
    for split, ys in splits.items():
        unknown = sorted({str(y) for y in ys} - set(index))
        if unknown:
            raise ValueError(
                f"{where}: label {unknown[0]!r} of the {split} split never occurs in training; training labels: "
                f"{', '.join(names)}"
            )
        ids[split] = [index[str(y)] for y in ys]
    return ids, names


class TextClassificationDataModule(ClassificationDataModule):
    """``data.kind=text_classification``: ``data.text_column`` and ``data.label_column`` of a CSV/TSV/JSONL
    file or folder (``data.path``) or of a Hugging Face dataset (``data.hf_name``).
    """

    def build(self) -> dict[str, Dataset]:
        cfg = self.cfg
        columns, where = column_splits(cfg, wanted_columns(cfg), self.seed)
        texts = {split: [str(t) for t in cols[cfg.text_column]] for split, cols in columns.items()}
        labels, self.label_names = label_ids(
            {split: [_as_label(y) for y in cols[cfg.label_column]] for split, cols in columns.items()}, where
        )
        self.num_classes = (
            len(self.label_names)
            if self.label_names
            else max(max(ys, default=0) for ys in labels.values()) + 1
        )
        self.tokenizer = build_tokenizer(
            cfg.tokenizer, texts, roles=self.special_roles, bpe_vocab_size=cfg.bpe_vocab_size
        )
        return {
            split: LabelledTexts(texts[split], labels[split], self.tokenizer, cfg.seq_len) for split in texts
        }

    def check_model(self) -> None:
        model_classes = self.model_cfg.num_classes
        if self.label_names and model_classes > 0 and model_classes != len(self.label_names):
            raise ValueError(
                f"the data has {len(self.label_names)} string labels ({', '.join(self.label_names)}) but "
                f"model.num_classes={model_classes}"
            )
        super().check_model()


def _as_label(value: Any) -> Any:
    """CSV cells are strings: "3" is the integer label 3; anything else stays as it is."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value
