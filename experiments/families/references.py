"""The reference points of the families study, computed from the very data each job trains on:

    python experiments/families/references.py 1337 1338 1339 > experiments/families/results/references.json

For each family (its default data, built as ``attnlab-train model=<family> seed=<seed>`` builds it) the
score of a model that ignores its input:
- a language model (windows of token ids): the unigram model of the training split, its entropy and
  its cross-entropy on the val and test splits, in nats per token (the loss to beat);
- a classifier (one label per example): always the majority class of the training split, its accuracy
  on the val and test splits, and chance (one over the number of classes);
- a sequence-to-sequence task (source, target pairs): copying the source, its exact match on val and test.
The generated data (ListOps, dates) depends on the seed, so each seed is computed.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import torch

from attnlab.data import build_datamodule
from attnlab.run import run_config

FAMILIES = ("gpt", "bert", "seq2seq", "vit")  # model presets, each with its default data and task
EVAL_SPLITS = ("val", "test")


def datasets(family: str, seed: int) -> dict[str, Any]:
    """The train/val/test datasets of ``attnlab-train model=<family> seed=<seed>``."""
    run = run_config([f"model={family}", f"seed={seed}"])
    datamodule = build_datamodule(
        run.data, needs=run.task.inner().data_needs, seed=run.seed, model_cfg=run.model
    )
    datamodule.setup("fit")
    return datamodule.datasets


def unigram(splits: dict[str, Any]) -> dict[str, float]:
    """Entropy of the training split's token frequencies, and the cross-entropy on val and test of
    those frequencies with one count added to each token (so that a token unseen in training costs a
    finite loss)."""
    tokens = {split: labels_of(splits[split]) for split in ("train", *EVAL_SPLITS)}
    vocab = 1 + max(int(t.max()) for t in tokens.values())
    counts = torch.bincount(tokens["train"], minlength=vocab).double()
    p = counts[counts > 0] / counts.sum()
    out = {"train_unigram_entropy": float(-(p * p.log()).sum())}
    smoothed = (counts + 1) / (counts.sum() + vocab)
    for split in EVAL_SPLITS:
        out[f"{split}_unigram_cross_entropy"] = float(-smoothed[tokens[split]].log().mean())
    return out


def labels_of(windows: Any) -> torch.Tensor:
    """Every predicted token of a split of windows, once (padding, marked below 0, left out)."""
    tokens = torch.cat([sample["labels"] for sample in samples(windows)])
    return tokens[tokens >= 0]


def majority_class(splits: dict[str, Any]) -> dict[str, float]:
    """Accuracy of always answering the training split's most frequent label, and chance."""
    train = Counter(int(sample["labels"]) for sample in samples(splits["train"]))
    label = train.most_common(1)[0][0]
    out = {"majority_label": label, "classes": len(train), "chance_acc": 1 / len(train)}
    for split in EVAL_SPLITS:
        labels = [int(sample["labels"]) for sample in samples(splits[split])]
        out[f"{split}_majority_acc"] = sum(y == label for y in labels) / len(labels)
    return out


def copy_source(splits: dict[str, Any]) -> dict[str, float]:
    """Exact match of answering each source with the source itself."""
    out = {}
    for split in EVAL_SPLITS:
        pairs = [(sample["src"], sample["tgt"]) for sample in samples(splits[split])]
        out[f"{split}_copy_exact_match"] = sum(s.tolist() == t.tolist() for s, t in pairs) / len(pairs)
    return out


def samples(dataset: Any) -> list[dict[str, Any]]:
    """Every sample of a dataset, by index (a map-style dataset need not stop an iteration by itself)."""
    return [dataset[i] for i in range(len(dataset))]


def reference(splits: dict[str, Any]) -> dict[str, float]:
    """The input-blind score that fits what the samples carry (token labels, one label, or pairs)."""
    sample = splits["train"][0]
    if "src" in sample:
        return copy_source(splits)
    if getattr(sample["labels"], "ndim", 0) == 0:
        return majority_class(splits)
    return unigram(splits)


def main(seeds: list[int]) -> None:
    rows = [
        {"family": family, "seed": seed, **reference(datasets(family, seed))}
        for family in FAMILIES
        for seed in seeds
    ]
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main([int(seed) for seed in sys.argv[1:]] or [1337])
