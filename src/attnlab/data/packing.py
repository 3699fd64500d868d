"""Text as separate documents (``data.packing=documents|padded`` of ``data.kind=text``).

Documents come from the source's own boundaries: the default corpus's topics (each entry of
``pydoc_data.topics`` is one), a Hugging Face dataset's rows, or ``data.document_separator`` (which
``data.path`` needs, and which splits the others' documents further). Validation and test are
whole documents carved from the end of the training documents (in source order), so every packing
of one source scores the same held-out documents.

* ``documents``: the documents' tokens follow each other in one stream with a parallel stream of
  document ids; training draws windows at random offsets (``PackedBatches``, the same draw as
  ``packing=none``), evaluation reads the fixed windows (``PackedWindows``). A causal LM's label at a
  document's last token (the next document's first) is IGNORE_INDEX, so the loss never predicts across a
  boundary. With ``data.document_mask`` (the default) each window carries ``document_ids`` (B, T),
  counted from 0 in each window: the models then attend within each document and restart positions
  there. Without it the documents see each other (the classic packed baseline).
* ``padded``: one document per row (``Pieces``): a long document in pieces of seq_len + 1 tokens that
  share their boundary token, so every token but a document's first is predicted once; rows are
  right-padded to seq_len (``attention_mask``, labels IGNORE_INDEX at padding). A causal-LM baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.data import Dataset, default_collate

from attnlab.data.checks import read_text_file, text_files
from attnlab.data.sampling import Key, SampleBatches, ShardedBatches, derive_seed, split_key, torch_generator
from attnlab.data.sources import complete_splits, hf_columns, hf_splits
from attnlab.data.text import Masking, TextDataModule, WindowBatches, Windows, causal_lm_sample
from attnlab.data.tokenizers import Tokenizer, build_tokenizer
from attnlab.schema.data import IGNORE_INDEX, Packing, TextData


def default_documents() -> list[str]:
    """The default corpus as documents: the Python documentation's topics in sorted key order."""
    from pydoc_data.topics import topics

    return [topics[key].strip("\n") + "\n" for key in sorted(topics)]


def document_splits(cfg: TextData, seed: int) -> dict[str, list[str]]:
    """The train/val/test documents of the source ``cfg`` names; a split the source lacks is carved
    from the end of the training documents (whole documents: validation, then test)."""
    if cfg.hf_name:
        found = {}
        for split, dataset in hf_splits(cfg, seed, shuffle=False, carve=False).items():
            rows = hf_columns(dataset, {"data.text_column": cfg.text_column}, cfg)[cfg.text_column]
            found[split] = [str(row) for row in rows]
    elif cfg.path is not None:  # each file is split by data.document_separator (the schema asks for it)
        found = {split: [read_text_file(f) for f in files] for split, files in text_files(cfg.path).items()}
    else:
        found = {"train": default_documents()}
    if cfg.document_separator is not None:
        separator = unescape(cfg.document_separator)
        found = {s: [part for doc in docs for part in doc.split(separator)] for s, docs in found.items()}
    found = {split: [doc for doc in docs if doc.strip()] for split, docs in found.items()}
    return complete_splits(found, cfg, seed, shuffle=False, take=lambda docs, idx: [docs[i] for i in idx])


def unescape(separator: str) -> str:
    """``data.document_separator`` with ``\\n`` and ``\\t`` as a newline and a tab, so that a command line
    can spell a blank line as ``data.document_separator='\\n\\n'``."""
    return separator.replace("\\n", "\n").replace("\\t", "\t")


@dataclass
class DocumentStream:
    """The tokens of a split's documents one after another (N,), and the document of each token (N,)."""

    tokens: Tensor
    documents: Tensor

    @classmethod
    def encode(cls, tokenizer: Tokenizer, documents: list[str]) -> DocumentStream:
        encoded = [tokenizer.encode_corpus(doc) for doc in documents]
        lengths = torch.tensor([len(ids) for ids in encoded])
        tokens = torch.tensor([i for ids in encoded for i in ids], dtype=torch.int32)
        return cls(tokens, torch.repeat_interleave(torch.arange(len(encoded), dtype=torch.int32), lengths))


def with_documents(
    sample: dict[str, Tensor], documents: Tensor, causal: bool, mask: bool
) -> dict[str, Tensor]:
    """A causal-LM or MLM sample of windows (..., span) whose tokens belong to ``documents`` (..., span):
    causal labels that cross into the next document become IGNORE_INDEX; with ``mask``, ``document_ids``."""
    if causal:  # inputs are the window's first span - 1 tokens, labels its last span - 1
        crosses = documents[..., 1:] != documents[..., :-1]
        sample["labels"] = sample["labels"].masked_fill(crosses, IGNORE_INDEX)
        documents = documents[..., :-1]
    if mask:
        sample["document_ids"] = (documents - documents[..., :1]).long()
    return sample


class PackedWindows(Dataset):
    """Evaluation samples of ``packing=documents``: the fixed windows over a document stream."""

    def __init__(
        self, stream: DocumentStream, span: int, stride: int, masking: Masking | None, seed: int, mask: bool
    ) -> None:
        self.stream, self.span = stream, span
        self.windows, self.documents = (
            Windows(stream.tokens, span, stride),
            Windows(stream.documents, span, stride),
        )
        self.masking, self.seed, self.mask = masking, seed, mask

    @property
    def tokens(self) -> Tensor:
        return self.stream.tokens

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, key: Key) -> dict[str, Tensor]:
        window, index = self.windows[key], split_key(key)[1]
        if self.masking is None:
            sample = causal_lm_sample(window)
        else:
            sample = self.masking.apply(
                window, self.masking.noise(window.shape, torch_generator(self.seed, index))
            )
        return with_documents(sample, self.documents[key], self.masking is None, self.mask)


class PackedBatches(WindowBatches):
    """Training batches of ``packing=documents``: the windows ``packing=none`` would draw at each position,
    with their tokens' documents gathered at the same offsets."""

    def __init__(self, stream: DocumentStream, span: int, masking: Masking | None, mask: bool, **shard: int):
        super().__init__(stream.tokens, span, masking, **shard)
        self.documents, self.mask = stream.documents, mask

    def fingerprint(self) -> dict[str, int]:
        return {**super().fingerprint(), "documents": len(torch.unique_consecutive(self.documents))}

    def __getitem__(self, position: int) -> dict[str, Tensor]:
        offsets, generator = self.offsets(position)
        sample = self.sample(self.gather(self.tokens, offsets), generator)
        return with_documents(sample, self.gather(self.documents, offsets), self.masking is None, self.mask)


class Pieces(Dataset):
    """``packing=padded``: one document per row, long documents in pieces of at most seq_len + 1 tokens
    (consecutive pieces share one token), as causal-LM samples right-padded to seq_len."""

    def __init__(self, stream: DocumentStream, seq_len: int, pad_id: int) -> None:
        self.tokens, self.seq_len, self.pad_id = stream.tokens, seq_len, pad_id
        starts, lengths = [], []
        _, counts = torch.unique_consecutive(stream.documents, return_counts=True)
        begin = 0
        for count in counts.tolist():
            for start in range(begin, begin + count - 1, seq_len):  # pieces of one token predict nothing
                starts.append(start)
                lengths.append(min(seq_len + 1, begin + count - start))
            begin += count
        self.starts, self.lengths = torch.tensor(starts), torch.tensor(lengths)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def real_fraction(self) -> float:
        """The share of the rows' positions that hold a real token (not padding)."""
        return float((self.lengths - 1).sum()) / max(1, len(self) * self.seq_len)

    def __getitem__(self, key: Key) -> dict[str, Tensor]:
        index = split_key(key)[1]
        start, length = int(self.starts[index]), int(self.lengths[index])
        piece = self.tokens[start : start + length].long()
        real = length - 1
        inputs = torch.full((self.seq_len,), self.pad_id, dtype=torch.long)
        labels = torch.full((self.seq_len,), IGNORE_INDEX, dtype=torch.long)
        inputs[:real], labels[:real] = piece[:-1], piece[1:]
        return {"input_ids": inputs, "labels": labels, "attention_mask": torch.arange(self.seq_len) < real}


def build_documents(module: TextDataModule) -> dict[str, Dataset]:
    """The datasets of ``packing=documents|padded`` for ``module`` (its tokenizer and masking set on the way)."""
    cfg = module.cfg
    documents = document_splits(cfg, module.seed)
    module.tokenizer = build_tokenizer(
        cfg.tokenizer, documents, roles=module.special_roles, bpe_vocab_size=cfg.bpe_vocab_size
    )
    module.masking = Masking.of(module.tokenizer, cfg.mlm_probability) if module.needs.masking else None
    span = cfg.seq_len + 1 if module.masking is None else cfg.seq_len
    datasets: dict[str, Dataset] = {}
    for split, docs in documents.items():
        if not docs and split == "test" and cfg.test_fraction == 0:
            continue
        stream = encode_split(module, docs, split, span)
        if cfg.packing == Packing.padded:
            datasets[split] = Pieces(stream, cfg.seq_len, module.pad_id)
        else:
            seed = derive_seed(module.seed, 4)
            datasets[split] = PackedWindows(
                stream, span, cfg.seq_len, module.masking, seed, cfg.document_mask
            )
    return datasets


def encode_split(module: TextDataModule, documents: list[str], split: str, span: int) -> DocumentStream:
    """A split's document stream; text the tokenizer cannot encode, or too little of it, is one line."""
    try:
        stream = DocumentStream.encode(module.tokenizer, documents)
    except ValueError as err:
        raise ValueError(f"the {split} split of {module.source_name()}: {err}") from None
    if len(stream.tokens) < span:
        raise ValueError(
            f"the {split} split has {len(stream.tokens)} tokens in {len(documents)} documents, fewer than "
            f"one window of {span} (data.seq_len={module.cfg.seq_len}); lower data.seq_len or give it more text"
        )
    return stream


def document_batches(module: TextDataModule, **shard: int) -> ShardedBatches:
    """The training stream of ``packing=documents`` (random windows) or ``padded`` (rows in seeded epochs)."""
    train = module.datasets["train"]
    shard["seed"] = derive_seed(shard["seed"], 3)
    if isinstance(train, Pieces):
        return SampleBatches(train, default_collate, **shard)
    return PackedBatches(train.stream, train.span, module.masking, module.cfg.document_mask, **shard)


class DocumentDataModule(TextDataModule):
    """``data.kind=text`` with ``data.packing=documents|padded``: the text as separate documents."""

    def build(self) -> dict[str, Dataset]:
        return build_documents(self)

    def train_batches(self, **shard: int) -> ShardedBatches:
        return document_batches(self, **shard)
