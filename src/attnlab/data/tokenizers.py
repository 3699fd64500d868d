"""Tokenizers: character-level (or a fixed word list) and byte-level BPE, with one set of special tokens.

Every tokenizer has the same seven special tokens, defined here and nowhere else. A tokenizer is
saved as one ``tokenizer.json`` in the run directory (and embedded in checkpoints), and
``load_tokenizer`` restores it with the same ids. Torch-free.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path

from attnlab.schema.rundir import TOKENIZER_FILE

# name -> token text; trained tokenizers give them ids 0..6 in this order.
SPECIAL_TOKENS: dict[str, str] = {
    "pad": "<pad>",
    "unk": "<unk>",
    "bos": "<bos>",
    "eos": "<eos>",
    "mask": "<mask>",
    "cls": "<cls>",
    "sep": "<sep>",
}
# Spellings of the same roles in ready-made tokenizer.json files (BERT, RoBERTa/BART, GPT-2).
SPECIAL_ALIASES: dict[str, tuple[str, ...]] = {
    "pad": ("[PAD]",),
    "unk": ("[UNK]",),
    "bos": ("<s>", "<|endoftext|>"),
    "eos": ("</s>", "<|endoftext|>"),
    "mask": ("[MASK]",),
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
}
FILE_NAME = TOKENIZER_FILE
VOCAB_FORMAT = "attnlab-vocab"


class Tokenizer(ABC):
    """What every attnlab tokenizer offers: encode/decode, ``vocab_size``, special ids, ``save``."""

    def __init__(self, special_ids: dict[str, int]) -> None:
        self.special_ids = dict(special_ids)
        ids = self.special_ids
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = ids["pad"], ids["unk"], ids["bos"], ids["eos"]
        self.mask_id, self.cls_id, self.sep_id = ids["mask"], ids["cls"], ids["sep"]

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str: ...

    @abstractmethod
    def save(self, directory: str | Path) -> Path:
        """Write ``tokenizer.json`` into ``directory`` and return its path."""

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_corpus(self, text: str) -> list[int]:
        """One long text as one id stream (split at line ends so BPE can encode lines in parallel)."""
        return [i for ids in self.encode_batch(text.splitlines(keepends=True)) for i in ids]


class VocabTokenizer(Tokenizer):
    """A fixed list of tokens: single characters (``split="char"``) or whitespace-separated words
    (``split="space"``, ListOps). Specials come first; text never produces a special id, and an
    unknown character or word becomes ``unk``.
    """

    def __init__(self, tokens: list[str], split: str = "char") -> None:
        if split not in ("char", "space"):
            raise ValueError(f"split={split!r}: a vocabulary tokenizer splits by 'char' or 'space'")
        if len(set(tokens)) != len(tokens):
            raise ValueError("the token list of a vocabulary tokenizer has duplicates")
        specials = {name: tokens.index(tok) for name, tok in SPECIAL_TOKENS.items() if tok in tokens}
        if len(specials) != len(SPECIAL_TOKENS):
            raise ValueError(
                f"the token list lacks special tokens: {sorted(set(SPECIAL_TOKENS) - set(specials))}"
            )
        super().__init__(specials)
        self.tokens = list(tokens)
        self.split = split
        special_set = set(SPECIAL_TOKENS.values())
        self._index = {tok: i for i, tok in enumerate(tokens) if tok not in special_set}

    @classmethod
    def from_texts(cls, texts: Iterable[str], split: str = "char") -> VocabTokenizer:
        """Specials, then every character (or word) of ``texts`` in sorted order."""
        seen: set[str] = set()
        for text in texts:
            seen.update(text if split == "char" else text.split())
        seen -= set(SPECIAL_TOKENS.values())
        return cls([*SPECIAL_TOKENS.values(), *sorted(seen)], split)

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        pieces = text if self.split == "char" else text.split()
        return [self._index.get(p, self.unk_id) for p in pieces]

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        specials = set(self.special_ids.values()) if skip_special else set()
        pieces = [self.tokens[i] for i in ids if i not in specials]
        return ("" if self.split == "char" else " ").join(pieces)

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / FILE_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"format": VOCAB_FORMAT, "split": self.split, "tokens": self.tokens}
        path.write_text(json.dumps(payload, ensure_ascii=False, indent=0), encoding="utf-8")
        return path


class BPETokenizer(Tokenizer):
    """A Hugging Face ``tokenizers.Tokenizer`` (byte-level BPE when trained here). Special roles
    missing from a ready-made file are added as new tokens at the end of its vocabulary.
    """

    def __init__(self, hf_tokenizer) -> None:
        self.hf = hf_tokenizer
        super().__init__(_resolve_specials(hf_tokenizer))

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special)

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / FILE_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        self.hf.save(str(path))
        return path


def _resolve_specials(hf_tokenizer) -> dict[str, int]:
    """Ids of the special roles, by attnlab's spelling or a known alias; missing ones are added."""
    ids: dict[str, int] = {}
    for name, token in SPECIAL_TOKENS.items():
        for spelling in (token, *SPECIAL_ALIASES[name]):
            if (i := hf_tokenizer.token_to_id(spelling)) is not None:
                ids[name] = i
                break
    missing = [SPECIAL_TOKENS[name] for name in SPECIAL_TOKENS if name not in ids]
    if missing:
        hf_tokenizer.add_special_tokens(missing)
        ids.update(
            {
                name: hf_tokenizer.token_to_id(SPECIAL_TOKENS[name])
                for name in SPECIAL_TOKENS
                if name not in ids
            }
        )
    return ids


def train_bpe(texts: Iterable[str], vocab_size: int) -> BPETokenizer:
    """A byte-level BPE (GPT-2 style) trained on ``texts``; the specials get ids 0..6."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(texts, trainer)
    return BPETokenizer(hf)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer saved at ``path`` (a tokenizer.json, or a directory holding one)."""
    path = Path(path)
    file = path / FILE_NAME if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(
            f"no tokenizer file at {file} (expected a {FILE_NAME} or a directory holding one)"
        )
    try:
        payload = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{file} is not a tokenizer file: it is not valid JSON ({err})") from None
    if isinstance(payload, dict) and payload.get("format") == VOCAB_FORMAT:
        return VocabTokenizer(payload["tokens"], payload["split"])
    from tokenizers import Tokenizer as HFTokenizer

    try:
        hf = HFTokenizer.from_file(str(file))
    except Exception as err:  # the Rust library raises a plain Exception
        raise ValueError(f"{file} is not a Hugging Face tokenizer.json: {err}") from None
    return BPETokenizer(hf)


def build_tokenizer(spec: str, train_texts: Iterable[str], bpe_vocab_size: int) -> Tokenizer:
    """``data.tokenizer``: "char" or "bpe" trained on the training texts, or a saved tokenizer's path."""
    if spec == "char":
        return VocabTokenizer.from_texts(train_texts, "char")
    if spec == "bpe":
        return train_bpe(train_texts, bpe_vocab_size)
    if not Path(spec).exists():
        raise FileNotFoundError(
            f"data.tokenizer={spec!r} is neither 'char', 'bpe' nor an existing tokenizer file"
        )
    return load_tokenizer(spec)
