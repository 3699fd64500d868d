"""Text for language models: the corpus, contiguous windows over its token stream, BERT's masking.

Sources (``data.kind=text``): the default corpus (the English prose of the Python documentation
shipped with every Python, in ``pydoc_data``), a local file or folder (``data.path``), or a
Hugging Face dataset (``data.hf_name``). Causal LM trains on windows at random offsets and
evaluates on fixed non-overlapping windows; MLM masks the same windows (80/10/10).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from attnlab.data.module import AttnlabDataModule
from attnlab.data.sampling import Key, derive_seed, split_key, torch_generator
from attnlab.data.sources import carve_text, existing, files_in, hf_columns, hf_splits, read_text, split_files
from attnlab.data.tokenizers import build_tokenizer


def default_corpus() -> str:
    """The Python documentation's topic texts (``pydoc_data.topics``), in sorted key order: ~0.46 MB of
    English prose with code, in the standard library of every Python, so no download is needed.
    """
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key].strip("\n") for key in sorted(topics)) + "\n"


def unigram_entropy(ids: Iterable[int]) -> float:
    """Entropy in nats of the token frequencies: the loss of the best model that ignores context."""
    counts = np.array(list(Counter(ids).values()), dtype=np.float64)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def text_splits(cfg: Any, seed: int) -> dict[str, str]:
    """The train/val/test text of ``data.kind=text``, from whichever source the config names."""
    if cfg.hf_name:
        texts = {}
        for split, dataset in hf_splits(cfg, seed, shuffle=False).items():
            rows = hf_columns(dataset, {"data.text_column": cfg.text_column}, cfg)[cfg.text_column]
            texts[split] = "\n".join(str(row).rstrip("\n") for row in rows)
        return texts
    if cfg.path is None:
        return carve_text(default_corpus(), cfg.val_fraction, cfg.test_fraction)
    path = existing(cfg.path)
    if path.is_file():
        return carve_text(read_text(path), cfg.val_fraction, cfg.test_fraction)
    found = split_files(path)
    if "train" in found:  # e.g. wikitext's train/valid/test.txt; a missing split is cut from train's end
        texts = carve_text(
            read_text(found["train"]),
            0.0 if "val" in found else cfg.val_fraction,
            0.0 if "test" in found else cfg.test_fraction,
        )
        return texts | {split: read_text(f) for split, f in found.items() if split != "train"}
    return carve_text("\n".join(read_text(f) for f in files_in(path)), cfg.val_fraction, cfg.test_fraction)


class Windows(Dataset):
    """Windows of ``span`` tokens over a token stream: at a random offset per (seed, epoch, index)
    when ``random``, else the fixed non-overlapping windows starting at 0, stride, 2*stride, ...

    A causal LM uses span = seq_len + 1 (inputs and shifted labels), stride = seq_len.
    """

    def __init__(self, tokens: Tensor, span: int, stride: int, *, random: bool, seed: int) -> None:
        self.tokens, self.span, self.stride, self.random, self.seed = tokens, span, stride, random, seed
        self.count = (len(tokens) - span) // stride + 1 if len(tokens) >= span else 0

    def __len__(self) -> int:
        return self.count

    def start(self, key: Key) -> int:
        epoch, index = split_key(key)
        if not self.random:
            return index * self.stride
        rng = np.random.default_rng([self.seed, epoch, index])
        return int(rng.integers(0, len(self.tokens) - self.span + 1))

    def __getitem__(self, key: Key) -> Tensor:
        start = self.start(key)
        return self.tokens[start : start + self.span].long()


class CausalLMWindows(Dataset):
    """Samples ``input_ids`` and next-token ``labels`` of ``seq_len`` tokens."""

    def __init__(self, windows: Windows) -> None:
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, key: Key) -> dict[str, Tensor]:
        w = self.windows[key]
        return {"input_ids": w[:-1], "labels": w[1:]}


def mask_tokens(
    ids: Tensor,
    *,
    probability: float,
    mask_id: int,
    special_ids: Tensor,
    ordinary_ids: Tensor,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor]:
    """BERT's masking: choose each non-special token with ``probability``; of those, 80% become
    ``mask_id``, 10% a random ordinary token, 10% stay. Labels are the original ids at chosen
    positions and -100 elsewhere.
    """
    prob = torch.full(ids.shape, probability)
    prob[torch.isin(ids, special_ids)] = 0.0
    chosen = torch.bernoulli(prob, generator=generator).bool()
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    to_mask = chosen & torch.bernoulli(torch.full(ids.shape, 0.8), generator=generator).bool()
    to_random = chosen & ~to_mask & torch.bernoulli(torch.full(ids.shape, 0.5), generator=generator).bool()
    random_ids = ordinary_ids[torch.randint(len(ordinary_ids), ids.shape, generator=generator)]
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(to_random, random_ids, inputs)
    return inputs, labels


class MaskedLMWindows(Dataset):
    """Windows masked BERT-style. The masking happens here rather than in a collator so that its
    randomness is seeded by (seed, epoch, index): a resumed run masks exactly as before, in any
    worker; evaluation windows get the same masks every time.
    """

    def __init__(self, windows: Windows, tokenizer: Any, probability: float, seed: int) -> None:
        self.windows, self.probability, self.seed = windows, probability, seed
        self.mask_id = tokenizer.mask_id
        specials = sorted(set(tokenizer.special_ids.values()))
        self.special_ids = torch.tensor(specials)
        self.ordinary_ids = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in set(specials)])

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, key: Key) -> dict[str, Tensor]:
        ids = self.windows[key]
        epoch, index = split_key(key)
        inputs, labels = mask_tokens(
            ids,
            probability=self.probability,
            mask_id=self.mask_id,
            special_ids=self.special_ids,
            ordinary_ids=self.ordinary_ids,
            generator=torch_generator(self.seed, epoch, index, 1),
        )
        return {
            "input_ids": inputs,
            "attention_mask": torch.ones_like(ids, dtype=torch.bool),
            "labels": labels,
        }


class TextDataModule(AttnlabDataModule):
    """``data.kind=text`` for ``task=causal_lm`` (GPT) and ``task=mlm`` (BERT)."""

    def build(self) -> dict[str, Dataset]:
        cfg = self.cfg
        texts = text_splits(cfg, self.seed)
        self.tokenizer = build_tokenizer(cfg.tokenizer, [texts["train"]], cfg.bpe_vocab_size)
        causal = self.task == "causal_lm"
        span = cfg.seq_len + 1 if causal else cfg.seq_len
        datasets = {}
        for split, text in texts.items():
            if not text and split == "test" and cfg.test_fraction == 0:
                continue
            tokens = torch.tensor(self.tokenizer.encode_corpus(text), dtype=torch.int32)
            if len(tokens) < span:
                raise ValueError(
                    f"the {split} split has {len(tokens)} tokens, fewer than one window of {span} "
                    f"(data.seq_len={cfg.seq_len}); lower data.seq_len or give it more text"
                )
            windows = Windows(
                tokens, span, cfg.seq_len, random=split == "train", seed=derive_seed(self.seed, 3)
            )
            datasets[split] = (
                CausalLMWindows(windows)
                if causal
                else MaskedLMWindows(windows, self.tokenizer, cfg.mlm_probability, derive_seed(self.seed, 4))
            )
        return datasets

    def unigram_entropy(self, split: str = "val") -> float:
        """Entropy (nats per token) of a split's token frequencies: a loss any context-aware LM must beat."""
        tokens = self.datasets[split].windows.tokens
        return unigram_entropy(tokens.tolist())
