"""Tokenizers: one class over a Hugging Face ``tokenizers.Tokenizer``, one file format for every kind.

- ``char``: a WordLevel vocabulary of the characters of the data, with a pre-tokenizer that isolates
  every character (nanoGPT's char model: Tiny Shakespeare has 65 tokens);
- ``space``: WordLevel over whitespace-separated words (ListOps);
- ``bpe``: a byte-level BPE trained on the training text;
- a saved ``tokenizer.json`` (a run directory's, or any Hugging Face tokenizer file).

Only the special tokens a task needs are added (its ``DataNeeds.specials``): a causal LM needs none, so a char
model's vocabulary is its corpus's characters. A tokenizer without an unknown token refuses text it
cannot encode, naming the characters (or words). Text never produces a special id: specials enter a
sequence only where code puts them (``<cls>``, ``<bos>``, a mask in fill-mask). The private format that
earlier attnlab versions also called ``tokenizer.json`` is read and converted, so old runs still load.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from attnlab.schema.rundir import TOKENIZER_FILE

# role -> token text, in the order trained tokenizers give them ids (0, 1, ...).
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
OLD_FORMAT = (
    "attnlab-vocab"  # {"format": ..., "split": "char"|"space", "tokens": [...]}, before the HF format
)
CHAR_PATTERN = r"[\s\S]"  # every character, newlines included


class Tokenizer:
    """A ``tokenizers.Tokenizer`` and the ids of the special roles it has (``None`` where it has none).

    WordLevel tokenizers of the two layouts built here (char, space) are looked up directly in their
    vocabulary: the same ids as the library's ``encode``, 12x (words) to 35x (characters) faster on
    this machine, which is seconds at the start of every run on a 1 MB corpus.
    """

    def __init__(self, hf) -> None:
        hf.encode_special_tokens = True  # "<pad>" in a text is five characters, not the pad token
        self.hf = hf
        self._read_vocabulary()

    def _read_vocabulary(self) -> None:
        hf = self.hf
        self.special_ids = _role_ids(hf)
        self.pad_id, self.unk_id = self.special_ids.get("pad"), self.special_ids.get("unk")
        self.bos_id, self.eos_id = self.special_ids.get("bos"), self.special_ids.get("eos")
        self.mask_id, self.cls_id = self.special_ids.get("mask"), self.special_ids.get("cls")
        self.sep_id = self.special_ids.get("sep")
        self.split = _word_level_split(hf)  # "char", "space" or None (the library encodes)
        self.vocab = hf.get_vocab(with_added_tokens=False) if self.split else {}
        self._char_table: np.ndarray | None = None  # code point -> id, built on first use (_char_ids)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    @property
    def all_special_ids(self) -> set[int]:
        """The ids of the roles and of every other token the file marks special (e.g. GPT-2's)."""
        added = {i for i, t in self.hf.get_added_tokens_decoder().items() if t.special}
        return added | set(self.special_ids.values())

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if self.split is None:
            return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]
        return [self._look_up(list(t) if self.split == "char" else t.split()) for t in texts]

    def encode_corpus(self, text: str) -> list[int]:
        """One long text as one id stream (BPE encodes it line by line, in parallel)."""
        if self.split is not None:
            return self.encode(text)
        return [i for ids in self.encode_batch(text.splitlines(keepends=True)) for i in ids]

    def encode_corpus_array(self, text: str) -> np.ndarray:
        """``encode_corpus`` as an int32 array; a char tokenizer's through a table indexed by code
        point (the 0.46 MB default corpus: 18 -> 0.6 ms), falling back to the lookup where a character
        is not in the table (whose error names it, or which maps it to the unknown token)."""
        if self.split == "char":
            ids = self._char_ids(text)
            if ids is not None:
                return ids
        return np.array(self.encode_corpus(text), dtype=np.int32)

    def _char_ids(self, text: str) -> np.ndarray | None:
        """The ids of ``text``'s characters by code point; None where one has no id in the table."""
        if self._char_table is None:
            chars = [(ord(c), i) for c, i in self.vocab.items() if len(c) == 1]
            table = np.full(max((code for code, _ in chars), default=0) + 1, -1, dtype=np.int32)
            for code, i in chars:
                table[code] = i
            self._char_table = table
        try:
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        except UnicodeEncodeError:  # a lone surrogate (text decoded with surrogateescape)
            return None
        table = self._char_table
        if codes.size and int(codes.max()) >= len(table):
            return None
        ids = table[codes]
        return None if ids.size and int(ids.min()) < 0 else ids

    def _look_up(self, pieces: list[str]) -> list[int]:
        vocab = self.vocab
        try:
            return [vocab[p] for p in pieces]
        except KeyError:
            if self.unk_id is not None:
                return [vocab.get(p, self.unk_id) for p in pieces]
            unknown = sorted(set(pieces) - vocab.keys())
            what = "character" if self.split == "char" else "word"
            shown = ", ".join(repr(p) for p in unknown[:10]) + (", ..." if len(unknown) > 10 else "")
            raise ValueError(
                f"the text has {len(unknown)} {what}(s) the tokenizer cannot encode: {shown} (its "
                f"{len(vocab)} {what}s come from the training data, and it has no unknown token)"
            ) from None

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def token_bytes(self) -> list[int] | None:
        """The UTF-8 bytes of the text each id covers (by id; specials cover none), or None where that
        is not a function of the id alone, so that bits per byte is exact or absent.

        Exact for the two layouts that split text without loss: characters (a token is one character)
        and byte-level BPE (a token is a byte string, one alphabet character per byte), the ``char``
        and ``bpe`` tokenizers and GPT-2-style files. Not for words split at whitespace (the spaces
        belong to no token), an unknown token (any text), normalisers or an added prefix space.
        """
        if self.unk_id is not None:
            return None
        if self.split == "char":
            sizes = {i: len(token.encode("utf-8")) for token, i in self.vocab.items()}
        elif _byte_level(self.hf):
            sizes = {i: len(token) for token, i in self.hf.get_vocab(with_added_tokens=False).items()}
        else:
            return None
        special = self.all_special_ids
        return [0 if i in special else sizes.get(i, 0) for i in range(self.vocab_size)]

    def start_ids(self) -> list[int]:
        """Where a decoder starts from an empty prompt: ``<bos>`` if the tokenizer has one, else a newline
        (as nanoGPT samples: the start of a line of the corpus)."""
        if self.bos_id is not None:
            return [self.bos_id]
        if self.split is None or "\n" in self.vocab:
            return self.encode("\n")
        raise ValueError(
            "the prompt is empty and the tokenizer has neither <bos> nor a newline: give a prompt"
        )

    def add_specials(self, roles: Iterable[str]) -> Tokenizer:
        """Add the special roles it lacks (at the end of the vocabulary); returns itself."""
        missing = [SPECIAL_TOKENS[role] for role in roles if role not in self.special_ids]
        if missing:
            self.hf.add_special_tokens(missing)
            self._read_vocabulary()
        return self

    def save(self, directory: str | Path) -> Path:
        """Write ``tokenizer.json`` into ``directory`` and return its path."""
        path = Path(directory) / FILE_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        self.hf.save(str(path))
        return path


def _role_ids(hf) -> dict[str, int]:
    """Ids of the special roles the tokenizer has, by attnlab's spelling or a known alias."""
    ids = {}
    for role, token in SPECIAL_TOKENS.items():
        for spelling in (token, *SPECIAL_ALIASES[role]):
            if (i := hf.token_to_id(spelling)) is not None:
                ids[role] = i
                break
    return ids


def _word_level_split(hf) -> str | None:
    """ "char" or "space" for the WordLevel layouts built here; None for any other tokenizer."""
    spec = json.loads(hf.to_str())
    if spec["model"]["type"] != "WordLevel" or spec.get("normalizer"):
        return None
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "WhitespaceSplit":
        return "space"
    if pre.get("type") == "Split" and pre.get("pattern") == {"Regex": CHAR_PATTERN} and not pre["invert"]:
        return "char"
    return None


def _byte_level(hf) -> bool:
    """Whether ``hf`` is a byte-level BPE whose tokens are exactly the bytes of the text they cover:
    a ByteLevel decoder (each character of a token is one byte), no normaliser, no prefix space added."""
    spec = json.loads(hf.to_str())
    decoder, pre = spec.get("decoder") or {}, spec.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre])
    return (
        spec["model"]["type"] == "BPE"
        and decoder.get("type") == "ByteLevel"
        and not spec.get("normalizer")
        and not any(part.get("add_prefix_space") for part in parts)
    )


def word_level(pieces: Iterable[str], split: str, roles: Iterable[str] = ()) -> Tokenizer:
    """A WordLevel tokenizer: the specials of ``roles`` (ids 0, 1, ...), then ``pieces`` in sorted order.

    ``split="char"`` isolates every character and decodes by joining them; ``"space"`` splits at
    whitespace and decodes with single spaces.
    """
    specials = [SPECIAL_TOKENS[role] for role in SPECIAL_TOKENS if role in set(roles)]
    return _word_level([*specials, *sorted(set(pieces) - set(specials))], split, specials)


def _word_level(tokens: list[str], split: str, specials: list[str]) -> Tokenizer:
    """WordLevel over ``tokens`` (id = position), split by character or at whitespace."""
    from tokenizers import Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=SPECIAL_TOKENS["unk"]))
    if split == "char":
        hf.pre_tokenizer = pre_tokenizers.Split(Regex(CHAR_PATTERN), behavior="isolated")
        hf.decoder = decoders.Fuse()
    elif split == "space":
        hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    else:
        raise ValueError(f"split={split!r}: a word-level tokenizer splits by 'char' or 'space'")
    hf.add_special_tokens(specials)
    return Tokenizer(hf)


def char_tokenizer(texts: Iterable[str], roles: Iterable[str] = ()) -> Tokenizer:
    """Every character of ``texts`` (all splits: the vocabulary is the data's alphabet), plus ``roles``."""
    chars: set[str] = set()
    for text in texts:
        chars.update(text)
    return word_level(chars, "char", roles)


def train_bpe(texts: Iterable[str], vocab_size: int, roles: Iterable[str] = ()) -> Tokenizer:
    """A byte-level BPE (GPT-2 style) trained on ``texts``; the specials of ``roles`` get ids 0, 1, ..."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[SPECIAL_TOKENS[role] for role in SPECIAL_TOKENS if role in set(roles)],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(texts, trainer)
    return Tokenizer(hf)


MAX_TOKENIZER_BYTES = 256 * 2**20  # the largest tokenizer.json files (multilingual BPE) hold tens of MiB


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer saved at ``path`` (a tokenizer.json, or a directory holding one), exactly as saved."""
    path = Path(path)
    file = path / FILE_NAME if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(
            f"no tokenizer file at {file} (expected a {FILE_NAME} or a directory holding one)"
        )
    if file.stat().st_size > MAX_TOKENIZER_BYTES:
        raise ValueError(
            f"{file} is not a tokenizer file: {file.stat().st_size / 2**20:.0f} MiB, above the "
            f"{MAX_TOKENIZER_BYTES // 2**20} MiB of any tokenizer.json"
        )
    try:
        payload = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{file} is not a tokenizer file: it is not valid JSON ({err})") from None
    except RecursionError:  # Python's parser gives up on JSON nested thousands of levels deep
        raise ValueError(f"{file} is not a tokenizer file: its JSON is nested too deeply") from None
    if isinstance(payload, dict) and payload.get("format") == OLD_FORMAT:
        return from_old_format(payload, file)
    from tokenizers import Tokenizer as HFTokenizer

    try:
        hf = HFTokenizer.from_str(json.dumps(payload))
    except Exception as err:  # the Rust library raises a plain Exception
        raise ValueError(f"{file} is not a Hugging Face tokenizer.json: {err}") from None
    return Tokenizer(hf)


def from_old_format(payload: dict, file: Path) -> Tokenizer:
    """An earlier attnlab's vocabulary file as the same WordLevel tokenizer: every token keeps its id
    (the weights of old checkpoints index by them), the seven specials stay special, and unknown
    characters still map to ``<unk>`` as they did."""
    tokens, split = payload.get("tokens"), payload.get("split")
    if not isinstance(tokens, list) or split not in ("char", "space") or len(set(tokens)) != len(tokens):
        raise ValueError(f"{file} is a damaged attnlab vocabulary file (format {OLD_FORMAT!r})")
    return _word_level(tokens, split, [t for t in SPECIAL_TOKENS.values() if t in tokens])


def build_tokenizer(
    spec: str, splits: dict[str, list[str]], *, roles: Sequence[str], bpe_vocab_size: int
) -> Tokenizer:
    """``data.tokenizer`` for texts per split: "char" over the characters of all splits, "bpe" trained on
    the training split, or a saved tokenizer's path (given the ``roles`` it lacks)."""
    if spec == "char":
        return char_tokenizer((t for texts in splits.values() for t in texts), roles)
    if spec == "bpe":
        return train_bpe(splits["train"], bpe_vocab_size, roles)
    if not Path(spec).exists():
        raise FileNotFoundError(
            f"data.tokenizer={spec!r} is neither 'char', 'bpe' nor an existing tokenizer file"
        )
    return load_tokenizer(spec).add_specials(roles)
