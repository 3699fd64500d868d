"""Tokenizers: one Hugging Face format for every kind, only the specials a task needs, stable ids through
save/load, old vocabulary files still loading, text that cannot be encoded named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlab.data.tokenizers import (
    SPECIAL_TOKENS,
    Tokenizer,
    build_tokenizer,
    char_tokenizer,
    load_tokenizer,
    train_bpe,
    word_level,
)
from attnlab.schema.task import task_config

TEXT = "The quick brown fox jumps over the lazy dog.\nNaïve café — déjà vu!\n" * 20


def roles_of(task: str) -> tuple[str, ...]:
    """The special-token roles the task ``task`` asks its data for."""
    return task_config(task).data_needs.specials


def test_char_tokenizer_is_the_alphabet_of_the_data():
    tok = char_tokenizer([TEXT])
    assert tok.vocab_size == len(set(TEXT)) and tok.special_ids == {}
    assert [tok.hf.id_to_token(i) for i in range(tok.vocab_size)] == sorted(set(TEXT))  # nanoGPT's ids
    ids = tok.encode(TEXT)
    assert len(ids) == len(TEXT) and tok.decode(ids) == TEXT
    assert tok.pad_id is None and tok.bos_id is None and tok.unk_id is None


def test_text_a_char_tokenizer_cannot_encode_is_an_error_naming_it():
    tok = char_tokenizer(["abc abc"])
    with pytest.raises(
        ValueError, match=r"2 character\(s\) the tokenizer cannot encode: 'Z', 'é' \(its 4 characters"
    ):
        tok.encode("a Zé")
    with pytest.raises(ValueError, match=r"cannot encode: '\\n', 'x' \("):
        tok.encode_corpus("abc\nx")


def test_a_char_tokenizers_id_array_is_its_lookup_of_every_character():
    """By code point, characters of one to four UTF-8 bytes; an unknown one is the lookup's error, or
    its unknown token; after specials are added the table follows the vocabulary."""
    text = TEXT + "emoji 😀 and a tab\t"
    tok = char_tokenizer([text])
    ids = tok.encode_corpus_array(text)
    assert ids.dtype == np.int32 and ids.tolist() == tok.encode_corpus(text)
    with pytest.raises(ValueError, match=r"1 character\(s\) the tokenizer cannot encode: 'Z' \("):
        tok.encode_corpus_array(text + "Z")
    assert tok.add_specials(("pad", "eos")).encode_corpus_array(text).tolist() == tok.encode_corpus(text)
    with_unknown = char_tokenizer(["abc"], roles=("unk",))
    assert with_unknown.encode_corpus_array("aZc😀").tolist() == [
        with_unknown.vocab["a"],
        with_unknown.unk_id,
        with_unknown.vocab["c"],
        with_unknown.unk_id,
    ]


def test_specials_come_first_in_one_order_and_text_never_yields_them():
    tok = char_tokenizer(["ab<>dp"], roles=("eos", "pad", "bos"))
    assert [tok.pad_id, tok.bos_id, tok.eos_id] == [0, 1, 2] and tok.mask_id is None
    assert tok.vocab_size == 3 + 6
    assert tok.encode("<pad>") == [tok.vocab[c] for c in "<pad>"]  # five characters, not the pad token
    assert tok.decode([tok.bos_id, *tok.encode("ab"), tok.eos_id]) == "ab"
    assert tok.decode([tok.bos_id, *tok.encode("ab")], skip_special=False) == "<bos>ab"
    assert list(SPECIAL_TOKENS) == ["pad", "unk", "bos", "eos", "mask", "cls", "sep"]
    assert roles_of("causal_lm") == ()


def test_space_tokenizer_splits_words():
    tok = word_level(["[MAX", "1", "2", "]", "[MIN", "3", "]"], "space", roles=("pad", "cls"))
    ids = tok.encode("[MAX 1 [MIN 3 2 ] ]")
    assert len(ids) == 7 and tok.decode(ids) == "[MAX 1 [MIN 3 2 ] ]"
    assert tok.decode([tok.cls_id, *ids]) == "[MAX 1 [MIN 3 2 ] ]"
    with pytest.raises(ValueError, match=r"1 word\(s\) the tokenizer cannot encode: '\[FOO'"):
        tok.encode("[FOO 1 ]")


@pytest.mark.parametrize("split", ["char", "space"])
def test_the_vocabulary_lookup_gives_the_library_s_ids(split):
    """Word-level tokenizers encode by looking pieces up (12-35x faster); the ids must be the library's."""
    tok = char_tokenizer([TEXT], roles=("pad",)) if split == "char" else word_level(TEXT.split(), "space")
    texts = [TEXT, "fox  the\n\ncafé vu!", ""]
    assert tok.encode_batch(texts) == [e.ids for e in tok.hf.encode_batch(texts, add_special_tokens=False)]


@pytest.mark.parametrize("kind", ["char", "bpe"])
@pytest.mark.parametrize("task", ["causal_lm", "seq2seq"])
def test_save_and_load_restore_the_same_ids(tmp_path, kind, task):
    roles = roles_of(task)
    tok = build_tokenizer(kind, {"train": [TEXT]}, roles=roles, bpe_vocab_size=300)
    path = tok.save(tmp_path / "run")
    assert path == tmp_path / "run" / "tokenizer.json"
    assert json.loads(path.read_text())["model"]["type"] == ("WordLevel" if kind == "char" else "BPE")
    for source in (tmp_path / "run", path):
        back = load_tokenizer(source)
        assert back.vocab_size == tok.vocab_size and back.special_ids == tok.special_ids
        assert set(back.special_ids) == set(roles)
        assert back.encode(TEXT) == tok.encode(TEXT)
        assert back.decode(tok.encode(TEXT)) == TEXT


def test_bpe_is_byte_level_and_merges_frequent_pairs():
    tok = train_bpe([TEXT], vocab_size=300, roles=roles_of("seq2seq"))
    assert [tok.pad_id, tok.bos_id, tok.eos_id] == [0, 1, 2]
    assert 259 < tok.vocab_size <= 300  # 256 bytes + 3 specials + merges
    ids = tok.encode(TEXT)
    assert len(ids) < len(TEXT.encode("utf-8")) / 2  # merges shorten the frequent text
    assert tok.decode(ids) == TEXT
    unseen = "日本語 text ✓"  # bytes never seen in training still round-trip
    assert tok.decode(tok.encode(unseen)) == unseen
    assert tok.encode_corpus(TEXT) == [i for line in TEXT.splitlines(keepends=True) for i in tok.encode(line)]
    assert train_bpe([TEXT], vocab_size=300).special_ids == {}  # a causal LM's BPE has no specials


def test_ready_tokenizer_json_maps_known_special_spellings(tmp_path):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "hello": 5, "world": 6}
    hf = HFTokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    hf.save(str(tmp_path / "bert-like.json"))
    tok = build_tokenizer(str(tmp_path / "bert-like.json"), {}, roles=roles_of("seq2seq"), bpe_vocab_size=0)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert (tok.bos_id, tok.eos_id) == (7, 8)  # roles the task needs and the file lacks are appended
    assert tok.vocab_size == 9
    assert tok.encode("hello world nope") == [5, 6, 1]  # the library's own path, with its unknown token
    tok.save(tmp_path / "run")
    assert load_tokenizer(tmp_path / "run").special_ids == tok.special_ids


def test_a_vocabulary_file_of_an_earlier_attnlab_loads_with_the_same_ids(tmp_path):
    """Old run directories and checkpoints hold ``{"format": "attnlab-vocab", ...}``; their weights index
    by those ids, and unknown characters mapped to <unk>."""
    tokens = [*SPECIAL_TOKENS.values(), "\n", " ", "a", "b", "c"]
    (tmp_path / "tokenizer.json").write_text(
        json.dumps({"format": "attnlab-vocab", "split": "char", "tokens": tokens}, indent=0)
    )
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, Tokenizer) and tok.vocab_size == 12
    assert [tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id, tok.mask_id, tok.cls_id, tok.sep_id] == list(
        range(7)
    )
    assert tok.encode("ab c\nz") == [9, 10, 8, 11, 7, 1]
    assert tok.decode([2, 9, 10, 3]) == "ab"
    space = {
        "format": "attnlab-vocab",
        "split": "space",
        "tokens": [*SPECIAL_TOKENS.values(), "[MAX", "1", "]"],
    }
    (tmp_path / "words.json").write_text(json.dumps(space))
    words = load_tokenizer(tmp_path / "words.json")
    assert words.encode("[MAX 1 ]") == [7, 8, 9] and words.decode([5, 7, 8, 9]) == "[MAX 1 ]"
    tok.save(tmp_path / "new")  # written back in the one format
    assert json.loads((tmp_path / "new" / "tokenizer.json").read_text())["model"]["type"] == "WordLevel"
    assert load_tokenizer(tmp_path / "new").encode("ab c\nz") == [9, 10, 8, 11, 7, 1]


def test_an_empty_prompt_starts_from_bos_else_a_newline():
    assert char_tokenizer(["a\nb"]).start_ids() == char_tokenizer(["a\nb"]).encode("\n")
    assert char_tokenizer(["a\nb"], roles=("bos",)).start_ids() == [0]
    with pytest.raises(
        ValueError, match=r"the prompt is empty and the tokenizer has neither <bos> nor a newline"
    ):
        char_tokenizer(["ab"]).start_ids()


def test_missing_and_broken_tokenizer_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no tokenizer file at .*tokenizer\.json"):
        load_tokenizer(tmp_path)
    with pytest.raises(
        FileNotFoundError, match=r"data.tokenizer='nope.json' is neither 'char', 'bpe' nor an existing"
    ):
        build_tokenizer("nope.json", {}, roles=(), bpe_vocab_size=0)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad.json is not a tokenizer file: it is not valid JSON"):
        load_tokenizer(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match=r"other.json is not a Hugging Face tokenizer.json"):
        load_tokenizer(tmp_path / "other.json")
    (tmp_path / "old.json").write_text('{"format": "attnlab-vocab", "split": "word", "tokens": []}')
    with pytest.raises(ValueError, match=r"old.json is a damaged attnlab vocabulary file"):
        load_tokenizer(tmp_path / "old.json")


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_token_bytes_sum_to_the_utf8_bytes_of_the_text(tmp_path, kind):
    """Bits per byte divides by these: over any encoded text, they add up to its UTF-8 bytes (é is 2,
    — 3), also after a save and load; the specials a task adds cover no text."""
    tok = build_tokenizer(kind, {"train": [TEXT]}, roles=roles_of("mlm"), bpe_vocab_size=300)
    for loaded in (tok, load_tokenizer(tok.save(tmp_path))):
        sizes = loaded.token_bytes()
        assert len(sizes) == loaded.vocab_size and sizes[loaded.mask_id] == 0
        for text in (TEXT, "déjà — café\n", "x"):
            assert sum(sizes[i] for i in loaded.encode_corpus(text)) == len(text.encode("utf-8"))


def test_token_bytes_are_none_where_an_id_does_not_fix_its_bytes():
    """Words split at whitespace (the spaces belong to no token) and an unknown token (any text): no
    exact count, so no bits per byte rather than a wrong one."""
    assert word_level(["a", "b"], "space").token_bytes() is None
    assert char_tokenizer(["ab"], roles=["unk"]).token_bytes() is None
    assert char_tokenizer(["ab"]).token_bytes() == [1, 1]
